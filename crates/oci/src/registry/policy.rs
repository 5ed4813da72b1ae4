//! Where credentials may go: what the operator allows registries beyond
//! the defaults (token services on other hosts, plain HTTP).

/// What the operator allows registries beyond the defaults. The default
/// allows nothing more: credentials go to the registry's own host, over
/// https.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistryPolicy {
    /// Hosts that may serve a registry's token service (the realm of its
    /// `WWW-Authenticate: Bearer` challenge) on another host than the
    /// registry, and so receive the registry's credentials to exchange for
    /// a token: `host` (any port) or `host:port`, e.g. `auth.docker.io`
    /// for Docker Hub.
    pub realm_hosts: Vec<String>,
    /// Registries (`host[:port]`, as references write them) read over
    /// plain HTTP, their credentials sent in the clear.
    pub plain_http: Vec<String>,
}

impl RegistryPolicy {
    pub(crate) fn allows_realm(&self, host: &str, port: Option<u16>) -> bool {
        self.realm_hosts.iter().any(|allowed| {
            let allowed = allowed.trim();
            allowed.eq_ignore_ascii_case(host)
                || port.is_some_and(|p| allowed.eq_ignore_ascii_case(&format!("{host}:{p}")))
        })
    }

    pub(crate) fn allows_plain_http(&self, registry: &str) -> bool {
        self.plain_http
            .iter()
            .any(|r| r.trim().eq_ignore_ascii_case(registry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realm_hosts_are_allowed_by_host_or_host_and_port() {
        let p = RegistryPolicy {
            realm_hosts: vec!["auth.docker.io".to_owned(), "10.0.0.1:5001".to_owned()],
            plain_http: vec!["10.0.0.1:5000".to_owned()],
        };
        assert!(p.allows_realm("auth.docker.io", None));
        assert!(p.allows_realm("AUTH.docker.io", Some(8443)));
        assert!(p.allows_realm("10.0.0.1", Some(5001)));
        assert!(!p.allows_realm("10.0.0.1", Some(5002)));
        assert!(!p.allows_realm("evil.docker.io", None));
        assert!(p.allows_plain_http("10.0.0.1:5000"));
        assert!(!p.allows_plain_http("10.0.0.1"));
        assert!(!RegistryPolicy::default().allows_realm("auth.docker.io", None));
    }
}
