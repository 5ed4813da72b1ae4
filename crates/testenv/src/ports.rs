//! Picking ports for servers that bind them later.

use std::net::TcpListener;

/// A port no socket listens on, on any address: API servers bind the
/// wildcard address when there is a node, so a port free on loopback alone
/// may already be taken on another address (a registry of another test
/// binary on the node's host address, say).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    free_port_on(std::net::Ipv4Addr::UNSPECIFIED.into())
}

/// The ports [`free_port_on`] picks from: below the kernel's ephemeral
/// range (32768–60999 by default), which is where bind(0) and every
/// outgoing connection get their port, and below Kubernetes' NodePorts
/// (30000–32767).
const PICKED_PORTS: std::ops::Range<u32> = 20000..30000;

/// A port free on `ip` (on every address for the unspecified one), for a
/// server started later that binds it itself. A port the kernel hands out
/// by itself (bind(0)) could be handed out again, to any outgoing
/// connection of this machine, in the seconds before that server binds
/// it (an API server starting took one in a full run: "bind: address
/// already in use"); one picked outside the ephemeral range cannot be.
/// Processes and threads start at different places of the range.
pub fn free_port_on(ip: std::net::IpAddr) -> anyhow::Result<u16> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let span = PICKED_PORTS.end - PICKED_PORTS.start;
    let start = std::process::id().wrapping_mul(7919)
        + NEXT.fetch_add(97, std::sync::atomic::Ordering::Relaxed);
    for i in 0..span {
        let port = PICKED_PORTS.start + (start + i) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if TcpListener::bind((ip, port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free port in {PICKED_PORTS:?} on {ip}")
}
