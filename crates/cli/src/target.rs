//! What the user asked to trace: `TYPE/NAME` or `TYPE NAME`, where TYPE is
//! a kind's name, plural, short name (as its CRD declares) or
//! `plural.group`; and the one-line errors a trace ends with.

/// The kinds trace knows, each the root of its own tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `workload.crossplane.io` KubernetesApplication (namespaced).
    Application,
    /// `pkg.crossplane.io` Provider.
    Provider,
    /// `extensions.crossplane.io` ExtensionRequest (namespaced).
    ExtensionRequest,
    /// `kubernetes.crossplane.io` Object.
    Object,
}

impl Kind {
    /// Its names: singular, plural, short names (crds/), and the group the
    /// `plural.group` and `singular.group` forms take.
    fn names(self) -> (&'static [&'static str], &'static str) {
        match self {
            Self::Application => (
                &["kubernetesapplication", "kubernetesapplications", "kapp"],
                "workload.crossplane.io",
            ),
            Self::Provider => (&["provider", "providers"], "pkg.crossplane.io"),
            Self::ExtensionRequest => (
                &["extensionrequest", "extensionrequests", "extreq"],
                "extensions.crossplane.io",
            ),
            Self::Object => (&["object", "objects"], "kubernetes.crossplane.io"),
        }
    }

    /// Whether its objects live in a namespace.
    pub fn namespaced(self) -> bool {
        matches!(self, Self::Application | Self::ExtensionRequest)
    }

    /// The kind as the API spells it.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Application => "KubernetesApplication",
            Self::Provider => "Provider",
            Self::ExtensionRequest => "ExtensionRequest",
            Self::Object => "Object",
        }
    }

    fn parse(word: &str) -> Option<Self> {
        let word = word.to_ascii_lowercase();
        [
            Self::Application,
            Self::Provider,
            Self::ExtensionRequest,
            Self::Object,
        ]
        .into_iter()
        .find(|k| {
            let (names, group) = k.names();
            let (name, rest) = word.split_once('.').unwrap_or((&word, ""));
            names.contains(&name) && (rest.is_empty() || rest == group)
        })
    }
}

/// One object to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub name: String,
}

/// Why a trace could not start, in one line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "unknown type {0:?}: trace knows kubernetesapplication (kapp), provider, extensionrequest (extreq) and object"
    )]
    UnknownKind(String),
    #[error("say what to trace as TYPE/NAME or TYPE NAME, e.g. provider/provider-kubernetes")]
    Usage,
    #[error("{kind} {name} not found{where_}")]
    NotFound {
        kind: &'static str,
        name: String,
        where_: String,
    },
}

/// Parses `TYPE/NAME` (one word) or `TYPE NAME` (two).
pub fn parse(words: &[String]) -> Result<Target, Error> {
    let (kind, name) = match words {
        [one] => one.split_once('/').ok_or(Error::Usage)?,
        [kind, name] if !kind.contains('/') => (kind.as_str(), name.as_str()),
        _ => return Err(Error::Usage),
    };
    if name.is_empty() || name.contains('/') {
        return Err(Error::Usage);
    }
    let kind = Kind::parse(kind).ok_or_else(|| Error::UnknownKind(kind.to_owned()))?;
    Ok(Target {
        kind,
        name: name.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(words: &[&str]) -> Result<Target, Error> {
        parse(&words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn every_spelling_of_a_kind_names_it() {
        let cases: &[(&[&str], Kind, &str)] = &[
            (&["kubernetesapplication/wp"], Kind::Application, "wp"),
            (&["kubernetesapplications/wp"], Kind::Application, "wp"),
            (&["kapp", "wp"], Kind::Application, "wp"),
            (
                &["KubernetesApplication.workload.crossplane.io/wp"],
                Kind::Application,
                "wp",
            ),
            (
                &["provider/provider-kubernetes"],
                Kind::Provider,
                "provider-kubernetes",
            ),
            (&["providers.pkg.crossplane.io/p"], Kind::Provider, "p"),
            (&["extreq/redis"], Kind::ExtensionRequest, "redis"),
            (
                &["extensionrequests", "redis"],
                Kind::ExtensionRequest,
                "redis",
            ),
            (&["object/ns"], Kind::Object, "ns"),
            (&["objects.kubernetes.crossplane.io/ns"], Kind::Object, "ns"),
        ];
        for (words, kind, name) in cases {
            let t = p(words).unwrap_or_else(|e| panic!("{words:?}: {e}"));
            assert_eq!((t.kind, t.name.as_str()), (*kind, *name), "{words:?}");
        }
    }

    #[test]
    fn an_unknown_kind_or_a_bad_shape_is_a_one_line_error() {
        assert!(matches!(p(&["deployment/x"]), Err(Error::UnknownKind(_))));
        assert!(matches!(
            p(&["provider.other.io/x"]),
            Err(Error::UnknownKind(_))
        ));
        for bad in [
            &["provider"][..],
            &["provider/"],
            &["a/b/c"],
            &["a", "b", "c"],
            &[],
        ] {
            assert!(matches!(p(bad), Err(Error::Usage)), "{bad:?}");
        }
        let e = p(&["widget/x"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("widget") && !e.contains('\n'), "{e}");
    }
}
