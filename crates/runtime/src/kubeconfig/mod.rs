//! Kubeconfigs read from Secrets are data: only inline connection details and
//! credentials are accepted, and they are checked before any client is built.
//!
//! A kubeconfig can do more than name a server and a credential. It can make
//! the client run a command (`exec`, `auth-provider`), read a file
//! (`tokenFile`, `client-certificate`, `client-key`, `certificate-authority`),
//! send its traffic through a proxy (`proxy-url`) or trust any server
//! (`insecure-skip-tls-verify`). Whoever may write a Secret that a
//! KubernetesCluster or ProviderConfig reads could then run code in a
//! controller, or have it read its own service-account token and send it to a
//! server of their choosing. [`sanitise`] therefore accepts an allow-list of
//! fields, refuses every other one, and names the refused field and where it
//! is (`users[0].user.exec`), never its value: a kubeconfig is full of
//! secrets, and its messages end up in conditions, events and logs.
//!
//! The [`Inline`] it returns becomes a client's [`kube::Config`] through
//! [`Inline::config`], field by field, without kube's kubeconfig loader: that
//! loader would also read `HTTPS_PROXY`, `NO_PROXY` and files named in the
//! kubeconfig, and its errors quote the YAML they failed on.

mod check;
mod inline;
mod refusal;

pub use check::sanitise;
pub use inline::Inline;
pub use refusal::Refusal;

/// The flag (and, upper-cased, the environment variable) that lets a
/// kubeconfig turn off verification of the server's certificate.
pub const ALLOW_INSECURE_FLAG: &str = "--allow-insecure-remote-tls";

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::refusal::EXEC;
    use super::*;

    /// A self-signed certificate and its key, for tests only.
    const CERT_PEM: &str = include_str!("../testdata/cert.pem");
    const KEY_PEM: &str = include_str!("../testdata/key.pem");

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    /// A full kubeconfig with every allowed field; `cluster_extra` and
    /// `user_extra` are inserted into the cluster and the user.
    fn kubeconfig(cluster_extra: &str, user_extra: &str) -> String {
        format!(
            r#"apiVersion: v1
kind: Config
preferences: {{colors: true}}
extensions: [{{name: tool, extension: {{any: thing}}}}]
clusters:
- name: prod
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: {ca}
    tls-server-name: kubernetes.default
    disable-compression: true
    extensions: [{{name: x, extension: {{}}}}]
{cluster_extra}
users:
- name: admin
  user:
    token: t0ken-value
    client-certificate-data: {ca}
    client-key-data: {key}
    extensions: []
{user_extra}
- name: basic
  user: {{username: u, password: p}}
contexts:
- name: prod
  context: {{cluster: prod, user: admin, namespace: apps, extensions: []}}
current-context: prod
"#,
            ca = b64(CERT_PEM),
            key = b64(KEY_PEM),
        )
    }

    fn refusal(text: &str) -> Refusal {
        match sanitise(text.as_bytes(), false) {
            Ok(i) => panic!("accepted: {i:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_full_kubeconfig_with_only_inline_material_is_accepted() {
        let inline = sanitise(kubeconfig("", "").as_bytes(), false).unwrap();
        let config = inline.config();
        assert_eq!(config.cluster_url.to_string(), "https://10.0.0.1:6443/");
        assert_eq!(config.default_namespace, "apps");
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            config.tls_server_name.as_deref(),
            Some("kubernetes.default")
        );
        assert!(!config.accept_invalid_certs);
        assert!(config.disable_compression);
        assert!(config.proxy_url.is_none());
        assert!(config.root_cert_file.is_none());
        let auth = &config.auth_info;
        assert!(auth.token.is_some());
        assert!(auth.client_certificate_data.is_some());
        assert!(auth.client_key_data.is_some());
        assert!(auth.exec.is_none() && auth.auth_provider.is_none() && auth.token_file.is_none());
        assert!(auth.client_certificate.is_none() && auth.client_key.is_none());
        assert!(auth.impersonate.is_none());
        // Debug never shows a credential.
        let debug = format!("{inline:?}");
        assert!(!debug.contains("t0ken-value"), "{debug}");
    }

    #[test]
    fn every_field_that_runs_reads_proxies_or_impersonates_is_refused_by_name() {
        let cases: &[(&str, &str, &str, &str)] = &[
            // (cluster extra, user extra, field named, advice in the message)
            (
                "",
                "    exec: {command: sh, args: [-c, 'touch /tmp/x']}",
                "users[0].user.exec",
                "users[].user.token",
            ),
            (
                "",
                "    auth-provider: {name: gcp, config: {cmd-path: /bin/sh}}",
                "users[0].user.auth-provider",
                "users[].user.token",
            ),
            (
                "",
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
                "users[0].user.tokenFile",
                "users[].user.token",
            ),
            (
                "",
                "    client-certificate: /etc/cert.pem",
                "users[0].user.client-certificate",
                "client-certificate-data",
            ),
            (
                "",
                "    client-key: /etc/key.pem",
                "users[0].user.client-key",
                "client-key-data",
            ),
            (
                "    certificate-authority: /etc/ca.pem",
                "",
                "clusters[0].cluster.certificate-authority",
                "certificate-authority-data",
            ),
            (
                "    proxy-url: http://evil.example:3128",
                "",
                "clusters[0].cluster.proxy-url",
                "remove it",
            ),
            (
                "    insecure-skip-tls-verify: true",
                "",
                "clusters[0].cluster.insecure-skip-tls-verify",
                "--allow-insecure-remote-tls",
            ),
            (
                "",
                "    as: system:admin",
                "users[0].user.as",
                "impersonate",
            ),
            ("", "    as-uid: '0'", "users[0].user.as-uid", "impersonate"),
            (
                "",
                "    as-groups: [system:masters]",
                "users[0].user.as-groups",
                "impersonate",
            ),
            (
                "",
                "    as-user-extra: {scopes: [all]}",
                "users[0].user.as-user-extra",
                "impersonate",
            ),
        ];
        for (cluster_extra, user_extra, field, advice) in cases {
            let e = refusal(&kubeconfig(cluster_extra, user_extra));
            let msg = e.to_string();
            assert!(
                matches!(&e, Refusal::Refused { field: f, .. } if f == field),
                "{field}: {msg}"
            );
            assert!(msg.starts_with(field), "{msg}");
            assert!(msg.contains(advice), "{field}: {msg}");
            for value in [
                "/tmp/x",
                "/var/run",
                "/etc/",
                "evil.example",
                "system:admin",
                "masters",
                "cmd-path",
            ] {
                assert!(!msg.contains(value), "{field} quotes its value: {msg}");
            }
        }
    }

    #[test]
    fn a_refused_field_in_an_unused_entry_refuses_the_whole_kubeconfig() {
        let text = kubeconfig("", "").replace(
            "  user: {username: u, password: p}",
            "  user: {exec: {command: sh}}",
        );
        assert_eq!(
            refusal(&text),
            Refusal::Refused {
                field: "users[1].user.exec".into(),
                reason: EXEC
            }
        );
    }

    #[test]
    fn insecure_tls_and_plain_http_are_allowed_only_with_the_flag() {
        let verify = kubeconfig("    insecure-skip-tls-verify: false", "");
        let inline = sanitise(verify.as_bytes(), false).unwrap();
        assert!(!inline.config().accept_invalid_certs);
        let text = kubeconfig("    insecure-skip-tls-verify: true", "")
            .replace("https://10.0.0.1", "http://10.0.0.1");
        let inline = sanitise(text.as_bytes(), true).unwrap();
        assert!(inline.config().accept_invalid_certs);
        assert!(inline.insecure_skip_tls_verify());
        let only_http = kubeconfig("", "").replace("https://10.0.0.1", "http://10.0.0.1");
        let e = refusal(&only_http);
        assert!(
            e.to_string()
                .starts_with("clusters[0].cluster.server is an http:// URL"),
            "{e}"
        );
    }

    #[test]
    fn unknown_fields_are_refused_without_repeating_their_name() {
        for (text, at) in [
            (
                kubeconfig("    s3cr3t-pasted-here: 1", ""),
                "clusters[0].cluster",
            ),
            (kubeconfig("", "    s3cr3t-pasted-here: 1"), "users[0].user"),
            (
                format!("s3cr3t-pasted-here: 1\n{}", kubeconfig("", "")),
                "the top level",
            ),
            (
                kubeconfig("", "").replace(
                    "- name: basic\n",
                    "- name: basic\n  s3cr3t-pasted-here: 1\n",
                ),
                "users[1]",
            ),
            (
                kubeconfig("", "").replace("namespace: apps", "s3cr3t-pasted-here: apps"),
                "contexts[0].context",
            ),
        ] {
            let e = refusal(&text);
            let msg = e.to_string();
            assert!(
                matches!(&e, Refusal::UnknownField { at: a, .. } if a == at),
                "{msg}"
            );
            assert!(!msg.contains("s3cr3t"), "{msg}");
        }
    }

    #[test]
    fn parse_errors_give_the_position_and_never_the_text() {
        let e = refusal("token: \"s3cr3t-abc\n  - [unterminated");
        let msg = e.to_string();
        assert!(matches!(e, Refusal::Syntax { .. }), "{msg}");
        assert!(msg.contains("line "), "{msg}");
        assert!(!msg.contains("s3cr3t"), "{msg}");
    }

    #[test]
    fn a_token_pasted_alone_is_not_a_kubeconfig_and_is_not_repeated() {
        for text in [
            "s3cr3t-abc",
            "eyJhbGciOiJSUzI1NiJ9.s3cr3t.sig",
            "[s3cr3t]",
            "42",
        ] {
            let e = refusal(text);
            assert_eq!(e, Refusal::NotAMapping, "{text}");
            assert!(!e.to_string().contains("s3cr3t"));
        }
        assert_eq!(refusal("  \n"), Refusal::Empty);
        assert_eq!(refusal("~"), Refusal::Empty);
        assert_eq!(
            sanitise(b"\xff\xfe", false).err(),
            Some(Refusal::NotUtf8 { offset: 0 })
        );
    }

    #[test]
    fn values_that_are_not_usable_are_named_not_quoted() {
        let cases = [
            (
                kubeconfig("", "").replace(&b64(CERT_PEM), "s3cr3t!!notbase64"),
                "clusters[0].cluster.certificate-authority-data",
            ),
            (
                kubeconfig("", "").replace("https://10.0.0.1:6443", "s3cr3t"),
                "clusters[0].cluster.server",
            ),
            (
                kubeconfig("", "").replace("t0ken-value", "\"s3cr3t\\nline\""),
                "users[0].user.token",
            ),
            (
                kubeconfig("", "").replace(&b64(KEY_PEM), &b64("s3cr3t")),
                "users[0].user.client-key-data",
            ),
            (
                kubeconfig("", "").replace("t0ken-value", "12345"),
                "users[0].user.token",
            ),
            (
                kubeconfig("", "").replace("https://10.0.0.1", "https://admin:s3cr3t@10.0.0.1"),
                "clusters[0].cluster.server",
            ),
        ];
        for (text, field) in cases {
            let e = refusal(&text);
            let msg = e.to_string();
            assert!(msg.starts_with(field), "{field}: {msg}");
            assert!(!msg.contains("s3cr3t") && !msg.contains("12345"), "{msg}");
        }
    }

    #[test]
    fn the_current_context_must_name_what_exists() {
        let base = kubeconfig("", "");
        let cases = [
            (
                base.replace("current-context: prod\n", ""),
                "current-context is missing",
            ),
            (
                base.replace("current-context: prod", "current-context: nope"),
                "current-context names no entry of contexts[]",
            ),
            (
                base.replace("{cluster: prod,", "{cluster: nope,"),
                "contexts[0].context.cluster names no entry of clusters[]",
            ),
            (
                base.replace("user: admin,", "user: nope,"),
                "contexts[0].context.user names no entry of users[]",
            ),
            (
                base.replace("    server: https://10.0.0.1:6443\n", ""),
                "clusters[0].cluster.server is missing",
            ),
            (
                base.replace("user: {username: u, password: p}", "user: {username: u}"),
                "users[1].user.password is missing",
            ),
        ];
        for (text, expected) in cases {
            let msg = refusal(&text).to_string();
            assert!(msg.starts_with(expected), "{expected}: {msg}");
        }
        // No user in the context: anonymous.
        let anonymous = base.replace("user: admin,", "");
        let config = sanitise(anonymous.as_bytes(), false).unwrap().config();
        assert!(config.auth_info.token.is_none());
    }
}
