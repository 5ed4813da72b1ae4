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

use std::fmt;

use base64::Engine as _;
use kube::config::AuthInfo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use serde_json::{Map, Value};

/// The flag (and, upper-cased, the environment variable) that lets a
/// kubeconfig turn off verification of the server's certificate.
pub const ALLOW_INSECURE_FLAG: &str = "--allow-insecure-remote-tls";

/// Why a kubeconfig was refused. Messages name fields by their path and
/// positions by line and column; they never quote what the Secret holds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The bytes are not UTF-8.
    #[error("it is not UTF-8 text (byte {offset} is not): put a kubeconfig there, as YAML")]
    NotUtf8 {
        /// Offset of the first byte that is not UTF-8.
        offset: usize,
    },
    /// Nothing is there.
    #[error("it is empty: put a kubeconfig there")]
    Empty,
    /// The YAML does not parse.
    #[error(
        "it is not one valid YAML document ({position}): put a kubeconfig there (the text is not repeated here, in case it is secret)"
    )]
    Syntax {
        /// "line L, column C", or "position unknown".
        position: String,
    },
    /// The YAML is not a mapping (e.g. a token pasted on its own).
    #[error(
        "it is not a kubeconfig: a kubeconfig is a YAML mapping with clusters, users, contexts and current-context (a token or a certificate on its own is not one)"
    )]
    NotAMapping,
    /// A field that can run a command, read a file, choose a proxy, turn off
    /// TLS verification or impersonate.
    #[error("{field} {reason}")]
    Refused {
        /// Where, e.g. `users[0].user.exec`.
        field: String,
        /// What it would do, and what to put instead.
        reason: &'static str,
    },
    /// A field that is not part of a kubeconfig, or not allowed where it is.
    /// Its name is not repeated: an unknown key may be a pasted secret.
    #[error(
        "{at} has a field that a kubeconfig from a Secret may not have there (its name is not repeated here, in case it is secret); the fields allowed there are: {allowed}"
    )]
    UnknownField {
        /// The mapping that holds it, e.g. `clusters[0].cluster`.
        at: String,
        /// The fields allowed in that mapping.
        allowed: &'static str,
    },
    /// A field has the wrong YAML type.
    #[error("{field} must be {expected}")]
    WrongType {
        /// Where.
        field: String,
        /// What it must be, e.g. "a string (quote it)".
        expected: &'static str,
    },
    /// A field's value is unusable.
    #[error("{field} {problem}")]
    Invalid {
        /// Where.
        field: String,
        /// What is wrong and how to fix it.
        problem: &'static str,
    },
    /// A required field is missing.
    #[error("{field} is missing: {hint}")]
    Missing {
        /// Where.
        field: String,
        /// What to put there.
        hint: &'static str,
    },
    /// A name refers to no entry.
    #[error("{field} names no entry of {list}: add it, or name one that exists")]
    Dangling {
        /// The referring field.
        field: String,
        /// The list searched, e.g. `contexts[]`.
        list: &'static str,
    },
}

const EXEC: &str = "runs a command in the controller, which a kubeconfig from a Secret may not do: inline the credential instead (users[].user.token, or client-certificate-data and client-key-data)";
const AUTH_PROVIDER: &str = "asks the controller to run an authentication plugin, which a kubeconfig from a Secret may not do: inline the credential instead (users[].user.token, or client-certificate-data and client-key-data)";
const TOKEN_FILE: &str = "names a file on the controller's disk, which a kubeconfig from a Secret may not do: inline the token under users[].user.token";
const CLIENT_CERTIFICATE: &str = "names a file on the controller's disk, which a kubeconfig from a Secret may not do: inline the certificate, base64-encoded PEM, under users[].user.client-certificate-data";
const CLIENT_KEY: &str = "names a file on the controller's disk, which a kubeconfig from a Secret may not do: inline the key, base64-encoded PEM, under users[].user.client-key-data";
const CERTIFICATE_AUTHORITY: &str = "names a file on the controller's disk, which a kubeconfig from a Secret may not do: inline the CA certificate, base64-encoded PEM, under clusters[].cluster.certificate-authority-data";
const PROXY_URL: &str = "sends the controller's traffic through a proxy, which a kubeconfig from a Secret may not choose: remove it, so the controller connects to server directly";
const INSECURE: &str = "turns off verification of the server's certificate: put the server's CA certificate, base64-encoded PEM, under clusters[].cluster.certificate-authority-data instead (an operator may allow this with --allow-insecure-remote-tls)";
const IMPERSONATE: &str = "asks to impersonate another identity, which a kubeconfig from a Secret may not do: put the credentials of the identity to act as under users[].user";
const PLAIN_HTTP: &str = "is an http:// URL, which would send the credentials unencrypted: use https:// (an operator may allow http:// with --allow-insecure-remote-tls)";

const TOP_FIELDS: &str =
    "apiVersion, kind, clusters, users, contexts, current-context, preferences, extensions";
const NAMED_CLUSTER_FIELDS: &str = "name, cluster";
const CLUSTER_FIELDS: &str = "server, certificate-authority-data, tls-server-name, insecure-skip-tls-verify (false), disable-compression, extensions";
const NAMED_USER_FIELDS: &str = "name, user";
const USER_FIELDS: &str =
    "token, username, password, client-certificate-data, client-key-data, extensions";
const NAMED_CONTEXT_FIELDS: &str = "name, context";
const CONTEXT_FIELDS: &str = "cluster, user, namespace, extensions";

/// What a kubeconfig that passed [`sanitise`] says, for its current context:
/// inline material only. Its `Debug` shows no credential.
#[derive(Clone)]
pub struct Inline {
    server: http::Uri,
    ca: Option<Vec<Vec<u8>>>,
    tls_server_name: Option<String>,
    insecure_skip_tls_verify: bool,
    disable_compression: bool,
    namespace: Option<String>,
    user: User,
}

#[derive(Clone, Default)]
struct User {
    token: Option<String>,
    username: Option<String>,
    password: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
}

impl fmt::Debug for Inline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let u = &self.user;
        f.debug_struct("Inline")
            .field("server", &self.server)
            .field("ca_certificates", &self.ca.as_ref().map(Vec::len))
            .field("tls_server_name", &self.tls_server_name)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("token", &u.token.as_ref().map(|_| "<redacted>"))
            .field("basic_auth", &u.username.as_ref().map(|_| "<redacted>"))
            .field(
                "client_certificate",
                &u.client_certificate_data.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Inline {
    /// The client configuration: exactly the checked fields, no proxy, no
    /// files, nothing from the environment. Timeouts are kube's defaults;
    /// callers bound them.
    pub fn config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.server.clone());
        if let Some(ns) = &self.namespace {
            config.default_namespace = ns.clone();
        }
        config.root_cert = self.ca.clone();
        config.root_cert_file = None;
        config.proxy_url = None;
        config.tls_server_name = self.tls_server_name.clone();
        config.accept_invalid_certs = self.insecure_skip_tls_verify;
        config.disable_compression = self.disable_compression;
        let u = &self.user;
        config.auth_info = AuthInfo {
            token: u.token.clone().map(Into::into),
            username: u.username.clone(),
            password: u.password.clone().map(Into::into),
            client_certificate_data: u.client_certificate_data.clone(),
            client_key_data: u.client_key_data.clone().map(Into::into),
            ..AuthInfo::default()
        };
        config
    }

    /// Whether the kubeconfig turned off verification of the server's
    /// certificate (only possible with [`ALLOW_INSECURE_FLAG`]).
    pub fn insecure_skip_tls_verify(&self) -> bool {
        self.insecure_skip_tls_verify
    }
}

/// Checks kubeconfig bytes from a Secret and returns what its current context
/// says, or why it is refused. Only inline material is allowed:
///
/// - clusters: `server` (https://), `certificate-authority-data`,
///   `tls-server-name`, `disable-compression`, and
///   `insecure-skip-tls-verify: true` only when `allow_insecure_tls` (which
///   also allows an `http://` server);
/// - users: `token`, `username` and `password`, `client-certificate-data`
///   and `client-key-data`;
/// - contexts: `cluster`, `user`, `namespace`;
/// - `extensions` and `preferences` anywhere they belong: metadata for
///   tools, never read.
///
/// Every entry is checked, not only the current context's: a refused field
/// anywhere refuses the whole kubeconfig. `exec`, `auth-provider`,
/// `tokenFile`, `client-certificate`, `client-key`, `certificate-authority`,
/// `proxy-url` and impersonation (`as`, `as-uid`, `as-groups`,
/// `as-user-extra`) are refused by name; any other field is refused without
/// repeating its name.
pub fn sanitise(bytes: &[u8], allow_insecure_tls: bool) -> Result<Inline, Refusal> {
    let text = std::str::from_utf8(bytes).map_err(|e| Refusal::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    if text.trim().is_empty() {
        return Err(Refusal::Empty);
    }
    // NB: the parser's own error messages quote the input around the
    // failure; only its position is kept.
    let root: Value = serde_saphyr::from_str(text).map_err(|e| Refusal::Syntax {
        position: e.location().map_or_else(
            || "position unknown".to_owned(),
            |l| format!("line {}, column {}", l.line(), l.column()),
        ),
    })?;
    let Value::Object(root) = root else {
        return Err(if root.is_null() {
            Refusal::Empty
        } else {
            Refusal::NotAMapping
        });
    };
    Checker { allow_insecure_tls }.check(&root)
}

struct Checker {
    allow_insecure_tls: bool,
}

/// One entry of `clusters`, `users` or `contexts`: its name and its inner
/// mapping (absent or null when missing).
struct Named<'a> {
    name: Option<&'a str>,
    inner: Option<&'a Map<String, Value>>,
}

impl Checker {
    fn check(&self, root: &Map<String, Value>) -> Result<Inline, Refusal> {
        let mut current_context = None;
        for (k, v) in root {
            match k.as_str() {
                "apiVersion" | "kind" => {
                    opt_string(v, k)?;
                }
                "current-context" => current_context = opt_string(v, k)?,
                "clusters" | "users" | "contexts" | "preferences" | "extensions" => {}
                _ => {
                    return Err(Refusal::UnknownField {
                        at: "the top level".to_owned(),
                        allowed: TOP_FIELDS,
                    });
                }
            }
        }
        let clusters = named_list(root.get("clusters"), "clusters", "cluster")?;
        let users = named_list(root.get("users"), "users", "user")?;
        let contexts = named_list(root.get("contexts"), "contexts", "context")?;
        let mut checked_clusters = Vec::with_capacity(clusters.len());
        for (i, c) in clusters.iter().enumerate() {
            checked_clusters.push(match c.inner {
                Some(m) => Some(self.cluster(m, &format!("clusters[{i}].cluster"))?),
                None => None,
            });
        }
        let mut checked_users = Vec::with_capacity(users.len());
        for (i, u) in users.iter().enumerate() {
            checked_users.push(match u.inner {
                Some(m) => user(m, &format!("users[{i}].user"))?,
                None => User::default(),
            });
        }
        let mut checked_contexts = Vec::with_capacity(contexts.len());
        for (i, c) in contexts.iter().enumerate() {
            checked_contexts.push(match c.inner {
                Some(m) => Some(context(m, &format!("contexts[{i}].context"))?),
                None => None,
            });
        }

        let Some(current) = current_context.filter(|c| !c.is_empty()) else {
            return Err(Refusal::Missing {
                field: "current-context".to_owned(),
                hint: "set it to the name of the entry of contexts[] to use",
            });
        };
        let ci = contexts
            .iter()
            .position(|c| c.name == Some(current))
            .ok_or(Refusal::Dangling {
                field: "current-context".to_owned(),
                list: "contexts[]",
            })?;
        let Some(Some(ctx)) = checked_contexts.get(ci) else {
            return Err(Refusal::Missing {
                field: format!("contexts[{ci}].context"),
                hint: "give the context a cluster (and a user)",
            });
        };
        let Some(cluster_name) = ctx.cluster.filter(|c| !c.is_empty()) else {
            return Err(Refusal::Missing {
                field: format!("contexts[{ci}].context.cluster"),
                hint: "name the entry of clusters[] to connect to",
            });
        };
        let cl = clusters
            .iter()
            .position(|c| c.name == Some(cluster_name))
            .ok_or(Refusal::Dangling {
                field: format!("contexts[{ci}].context.cluster"),
                list: "clusters[]",
            })?;
        let Some(Some(cluster)) = checked_clusters.get(cl) else {
            return Err(Refusal::Missing {
                field: format!("clusters[{cl}].cluster"),
                hint: "give the cluster a server (and its certificate-authority-data)",
            });
        };
        let user =
            match ctx.user.filter(|u| !u.is_empty()) {
                // No user: anonymous, as kubectl does.
                None => User::default(),
                Some(name) => {
                    let ui = users.iter().position(|u| u.name == Some(name)).ok_or(
                        Refusal::Dangling {
                            field: format!("contexts[{ci}].context.user"),
                            list: "users[]",
                        },
                    )?;
                    checked_users.get(ui).cloned().unwrap_or_default()
                }
            };
        let Some(server) = cluster.server.clone() else {
            return Err(Refusal::Missing {
                field: format!("clusters[{cl}].cluster.server"),
                hint: "put the API server's https:// URL there",
            });
        };
        Ok(Inline {
            server,
            ca: cluster.ca.clone(),
            tls_server_name: cluster.tls_server_name.clone(),
            insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
            disable_compression: cluster.disable_compression,
            namespace: ctx.namespace.map(str::to_owned),
            user,
        })
    }

    fn cluster(&self, m: &Map<String, Value>, at: &str) -> Result<CheckedCluster, Refusal> {
        let mut out = CheckedCluster::default();
        for (k, v) in m {
            if v.is_null() {
                continue;
            }
            let field = || format!("{at}.{k}");
            match k.as_str() {
                "server" => out.server = Some(self.server(v, &field())?),
                "certificate-authority-data" => {
                    let pem = base64_pem(v, &field())?;
                    let certs = CertificateDer::pem_slice_iter(&pem)
                        .map(|c| c.map(|c| c.as_ref().to_vec()))
                        .collect::<Result<Vec<_>, _>>()
                        .ok()
                        .filter(|c| !c.is_empty())
                        .ok_or_else(|| Refusal::Invalid {
                            field: field(),
                            problem: "does not hold PEM certificates: put the CA certificate there as base64-encoded PEM (base64 -w0 ca.crt)",
                        })?;
                    out.ca = Some(certs);
                }
                "tls-server-name" => {
                    let name = string(v, &field())?;
                    if ServerName::try_from(name).is_err() {
                        return Err(Refusal::Invalid {
                            field: field(),
                            problem: "is not a DNS name or IP address: put the name the server's certificate is issued for there",
                        });
                    }
                    out.tls_server_name = Some(name.to_owned());
                }
                "insecure-skip-tls-verify" => {
                    let skip = v.as_bool().ok_or_else(|| Refusal::WrongType {
                        field: field(),
                        expected: "true or false",
                    })?;
                    if skip && !self.allow_insecure_tls {
                        return Err(Refusal::Refused {
                            field: field(),
                            reason: INSECURE,
                        });
                    }
                    out.insecure_skip_tls_verify = skip;
                }
                "disable-compression" => {
                    out.disable_compression = v.as_bool().ok_or_else(|| Refusal::WrongType {
                        field: field(),
                        expected: "true or false",
                    })?;
                }
                "extensions" => {}
                "certificate-authority" => return Err(refused(field(), CERTIFICATE_AUTHORITY)),
                "proxy-url" => return Err(refused(field(), PROXY_URL)),
                _ => {
                    return Err(Refusal::UnknownField {
                        at: at.to_owned(),
                        allowed: CLUSTER_FIELDS,
                    });
                }
            }
        }
        Ok(out)
    }

    fn server(&self, v: &Value, field: &str) -> Result<http::Uri, Refusal> {
        let invalid = || Refusal::Invalid {
            field: field.to_owned(),
            problem: "is not a URL: put the API server's https:// URL there",
        };
        let uri: http::Uri = string(v, field)?.parse().map_err(|_| invalid())?;
        if uri.host().is_none_or(str::is_empty) {
            return Err(invalid());
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(Refusal::Invalid {
                field: field.to_owned(),
                problem: "carries credentials in the URL: put only the server's address there, and the credentials under users[].user",
            });
        }
        match uri.scheme_str() {
            Some("https") => Ok(uri),
            Some("http") if self.allow_insecure_tls => Ok(uri),
            Some("http") => Err(Refusal::Invalid {
                field: field.to_owned(),
                problem: PLAIN_HTTP,
            }),
            _ => Err(invalid()),
        }
    }
}

#[derive(Default)]
struct CheckedCluster {
    server: Option<http::Uri>,
    ca: Option<Vec<Vec<u8>>>,
    tls_server_name: Option<String>,
    insecure_skip_tls_verify: bool,
    disable_compression: bool,
}

struct CheckedContext<'a> {
    cluster: Option<&'a str>,
    user: Option<&'a str>,
    namespace: Option<&'a str>,
}

fn user(m: &Map<String, Value>, at: &str) -> Result<User, Refusal> {
    let mut out = User::default();
    for (k, v) in m {
        if v.is_null() {
            continue;
        }
        let field = || format!("{at}.{k}");
        match k.as_str() {
            "token" => {
                let token = string(v, &field())?;
                // It becomes an Authorization header: a line break in it
                // would otherwise fail every request with a less clear error.
                if http::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
                    return Err(Refusal::Invalid {
                        field: field(),
                        problem: "holds characters an HTTP header cannot carry (a line break?): put the token alone there",
                    });
                }
                out.token = Some(token.to_owned());
            }
            "username" => out.username = Some(string(v, &field())?.to_owned()),
            "password" => out.password = Some(string(v, &field())?.to_owned()),
            "client-certificate-data" => {
                let pem = base64_pem(v, &field())?;
                if !CertificateDer::pem_slice_iter(&pem).any(|c| c.is_ok()) {
                    return Err(Refusal::Invalid {
                        field: field(),
                        problem: "does not hold a PEM certificate: put the client certificate there as base64-encoded PEM",
                    });
                }
                out.client_certificate_data = Some(string(v, &field())?.to_owned());
            }
            "client-key-data" => {
                let pem = base64_pem(v, &field())?;
                if PrivateKeyDer::from_pem_slice(&pem).is_err() {
                    return Err(Refusal::Invalid {
                        field: field(),
                        problem: "does not hold a PEM private key: put the client key there as base64-encoded PEM",
                    });
                }
                out.client_key_data = Some(string(v, &field())?.to_owned());
            }
            "extensions" => {}
            "exec" => return Err(refused(field(), EXEC)),
            "auth-provider" => return Err(refused(field(), AUTH_PROVIDER)),
            "tokenFile" => return Err(refused(field(), TOKEN_FILE)),
            "client-certificate" => return Err(refused(field(), CLIENT_CERTIFICATE)),
            "client-key" => return Err(refused(field(), CLIENT_KEY)),
            "as" | "as-uid" | "as-groups" | "as-user-extra" => {
                return Err(refused(field(), IMPERSONATE));
            }
            _ => {
                return Err(Refusal::UnknownField {
                    at: at.to_owned(),
                    allowed: USER_FIELDS,
                });
            }
        }
    }
    match (&out.username, &out.password) {
        (Some(_), None) => Err(Refusal::Missing {
            field: format!("{at}.password"),
            hint: "basic authentication needs both username and password",
        }),
        (None, Some(_)) => Err(Refusal::Missing {
            field: format!("{at}.username"),
            hint: "basic authentication needs both username and password",
        }),
        _ => match (&out.client_certificate_data, &out.client_key_data) {
            (Some(_), None) => Err(Refusal::Missing {
                field: format!("{at}.client-key-data"),
                hint: "a client certificate needs its key, base64-encoded PEM",
            }),
            (None, Some(_)) => Err(Refusal::Missing {
                field: format!("{at}.client-certificate-data"),
                hint: "a client key needs its certificate, base64-encoded PEM",
            }),
            _ => Ok(out),
        },
    }
}

fn context<'a>(m: &'a Map<String, Value>, at: &str) -> Result<CheckedContext<'a>, Refusal> {
    let mut out = CheckedContext {
        cluster: None,
        user: None,
        namespace: None,
    };
    for (k, v) in m {
        match k.as_str() {
            "cluster" => out.cluster = opt_string(v, &format!("{at}.{k}"))?,
            "user" => out.user = opt_string(v, &format!("{at}.{k}"))?,
            "namespace" => out.namespace = opt_string(v, &format!("{at}.{k}"))?,
            "extensions" => {}
            _ => {
                return Err(Refusal::UnknownField {
                    at: at.to_owned(),
                    allowed: CONTEXT_FIELDS,
                });
            }
        }
    }
    Ok(out)
}

/// The entries of `clusters`, `users` or `contexts` (`list`), whose inner
/// mapping is under `inner`.
fn named_list<'a>(
    v: Option<&'a Value>,
    list: &str,
    inner: &str,
) -> Result<Vec<Named<'a>>, Refusal> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(Refusal::WrongType {
                field: list.to_owned(),
                expected: "a list",
            });
        }
    };
    let allowed = match list {
        "clusters" => NAMED_CLUSTER_FIELDS,
        "users" => NAMED_USER_FIELDS,
        _ => NAMED_CONTEXT_FIELDS,
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{list}[{i}]");
        let Value::Object(m) = item else {
            return Err(Refusal::WrongType {
                field: at,
                expected: "a mapping with name and its details",
            });
        };
        let mut named = Named {
            name: None,
            inner: None,
        };
        for (k, v) in m {
            if k == "name" {
                named.name = opt_string(v, &format!("{at}.name"))?;
            } else if k == inner {
                named.inner = match v {
                    Value::Null => None,
                    Value::Object(m) => Some(m),
                    _ => {
                        return Err(Refusal::WrongType {
                            field: format!("{at}.{inner}"),
                            expected: "a mapping",
                        });
                    }
                };
            } else {
                return Err(Refusal::UnknownField { at, allowed });
            }
        }
        out.push(named);
    }
    Ok(out)
}

fn refused(field: String, reason: &'static str) -> Refusal {
    Refusal::Refused { field, reason }
}

fn string<'a>(v: &'a Value, field: &str) -> Result<&'a str, Refusal> {
    v.as_str().ok_or_else(|| Refusal::WrongType {
        field: field.to_owned(),
        expected: "a string (quote it)",
    })
}

fn opt_string<'a>(v: &'a Value, field: &str) -> Result<Option<&'a str>, Refusal> {
    match v {
        Value::Null => Ok(None),
        other => string(other, field).map(Some),
    }
}

/// Decodes a `*-data` field: base64 of PEM text. Decoding errors are not
/// passed on (they name the offending byte).
fn base64_pem(v: &Value, field: &str) -> Result<Vec<u8>, Refusal> {
    base64::engine::general_purpose::STANDARD
        .decode(string(v, field)?)
        .map_err(|_| Refusal::Invalid {
            field: field.to_owned(),
            problem: "is not base64: encode the PEM file with base64 (base64 -w0 file.pem)",
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate and its key, for tests only.
    const CERT_PEM: &str = include_str!("testdata/cert.pem");
    const KEY_PEM: &str = include_str!("testdata/key.pem");

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
