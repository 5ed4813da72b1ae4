//! The checks: every entry of a kubeconfig is walked, only inline material
//! is accepted, and the current context's entries become an [`Inline`].

use base64::Engine as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use serde_json::{Map, Value};

use super::inline::{Inline, User};
use super::refusal::*;

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
