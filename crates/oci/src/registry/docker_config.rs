//! A pull secret's credentials for one registry
//! (`kubernetes.io/dockerconfigjson`).

use base64::Engine as _;
use serde_json::Value;

use super::Auth;

/// The credentials for `registry` (`host[:port]`) in a
/// `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`:
/// `{"auths": {"host": {"username", "password"} or {"auth":
/// base64("user:password")}}}`. Keys may be written as URLs
/// (`https://host/v2/`); the host must match exactly.
pub fn auth_from_docker_config(json: &[u8], registry: &str) -> Option<Auth> {
    let config: Value = serde_json::from_slice(json).ok()?;
    let auths = config.get("auths")?.as_object()?;
    let host = |k: &str| {
        let k = k
            .strip_prefix("https://")
            .or_else(|| k.strip_prefix("http://"))
            .unwrap_or(k);
        k.split('/').next().unwrap_or_default().to_owned()
    };
    let entry = auths.iter().find(|(k, _)| host(k) == registry)?.1;
    let field = |k: &str| {
        entry
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    if let (Some(username), Some(password)) = (field("username"), field("password")) {
        return Some(Auth::Basic {
            username: username.to_owned(),
            password: password.to_owned(),
        });
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(field("auth")?.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (username, password) = decoded.split_once(':')?;
    Some(Auth::Basic {
        username: username.to_owned(),
        password: password.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn docker_config_credentials_in_both_forms() {
        let plain = br#"{"auths":{"reg.example:5000":{"username":"u","password":"p"}}}"#;
        let basic = |u: &str, p: &str| {
            Some(Auth::Basic {
                username: u.into(),
                password: p.into(),
            })
        };
        assert_eq!(
            auth_from_docker_config(plain, "reg.example:5000"),
            basic("u", "p")
        );
        // base64("u:p:q"): the password may hold colons.
        let encoded = br#"{"auths":{"https://reg.example/v2/":{"auth":"dTpwOnE="}}}"#;
        assert_eq!(
            auth_from_docker_config(encoded, "reg.example"),
            basic("u", "p:q")
        );
        // The host must match exactly: no port, another port, a suffix.
        assert_eq!(auth_from_docker_config(plain, "reg.example"), None);
        assert_eq!(auth_from_docker_config(plain, "reg.example:5001"), None);
        assert_eq!(auth_from_docker_config(encoded, "xreg.example"), None);
        assert_eq!(auth_from_docker_config(b"not json", "reg.example"), None);
        assert_eq!(
            auth_from_docker_config(br#"{"auths":{"reg.example":{"auth":"!!"}}}"#, "reg.example"),
            None
        );
        // Never printed.
        let debug = format!("{:?}", basic("u", "secret-pw"));
        assert!(!debug.contains("secret-pw"), "{debug}");
    }
}
