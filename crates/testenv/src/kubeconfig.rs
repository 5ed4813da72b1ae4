//! Kubeconfigs of the test clusters: a server, its CA and a bearer token.

/// A kubeconfig for `https://<host>:<port>` with a bearer token.
pub(crate) fn kubeconfig_at(
    name: &str,
    host: &str,
    port: u16,
    ca_pem: &[u8],
    user: &str,
    token: &str,
) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: https://{host}:{port}\n    certificate-authority-data: {ca}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {user}\ncurrent-context: {name}\nusers:\n- name: {user}\n  user:\n    token: {token}\n",
        ca = encode(ca_pem)
    )
}

/// The standard base64 alphabet.
const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Minimal standard base64 (no dependency for one call).
fn encode(input: &[u8]) -> String {
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn encodes_like_rfc_4648() {
        assert_eq!(super::encode(b"f"), "Zg==");
        assert_eq!(super::encode(b"fo"), "Zm8=");
        assert_eq!(super::encode(b"foobar"), "Zm9vYmFy");
    }
}
