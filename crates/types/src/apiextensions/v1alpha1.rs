//! `apiextensions.crossplane.io/v1alpha1`: ManagedResourceDefinition and
//! ManagedResourceActivationPolicy, as Crossplane v2 has them. A Provider
//! package's managed-resource CRDs are delivered as MRDs; only an Active
//! MRD has its CRD, and a policy's `spec.activate` patterns make MRDs
//! Active (packages without the `SafeStart` capability start Active).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceConversion, CustomResourceDefinitionNames,
    CustomResourceSubresources, SelectableField,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, conditions_schema};

/// Desired state of a ManagedResourceDefinition: a CRD's spec, whether it
/// is Active, and the connection details its resources publish.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A ManagedResourceDefinition (MRD) is a Provider's managed-resource kind waiting to be served: its CRD exists only while the MRD is Active. A ManagedResourceActivationPolicy whose spec.activate pattern matches the MRD's name makes it Active; a package without the SafeStart capability delivers its MRDs Active. Setting spec.state back to Inactive removes the CRD once no object of the kind is left (until then the objects are named in an event and the Established condition).",
    group = "apiextensions.crossplane.io",
    version = "v1alpha1",
    kind = "ManagedResourceDefinition",
    status = "ManagedResourceDefinitionStatus",
    shortname = "mrd",
    shortname = "mrds",
    category = "crossplane",
    printcolumn = r#"{"name":"STATE","type":"string","jsonPath":".spec.state"}"#,
    printcolumn = r#"{"name":"ESTABLISHED","type":"string","jsonPath":".status.conditions[?(@.type=='Established')].status"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedResourceDefinitionSpec {
    /// Group of the kind, as a CRD's spec.group.
    pub group: String,
    /// Names of the kind, as a CRD's spec.names.
    pub names: CustomResourceDefinitionNames,
    /// Scope of the kind: Namespaced or Cluster.
    #[serde(default = "namespaced")]
    #[schemars(default = "namespaced")]
    pub scope: String,
    /// Versions of the kind, as a CRD's spec.versions.
    pub versions: Vec<ManagedResourceDefinitionVersion>,
    /// Conversion between versions, as a CRD's spec.conversion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversion: Option<CustomResourceConversion>,
    /// PreserveUnknownFields, as a CRD's (deprecated) field.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preserve_unknown_fields: bool,
    /// ConnectionDetails the kind's resources publish, documented.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connection_details: Vec<ConnectionDetail>,
    /// State: Active (the CRD is served) or Inactive (the default).
    #[serde(default)]
    pub state: ManagedResourceDefinitionState,
}

fn namespaced() -> String {
    "Namespaced".to_owned()
}

/// One version of an MRD's kind, as a CRD version.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedResourceDefinitionVersion {
    /// Name of the version, e.g. v1alpha1.
    pub name: String,
    /// Served: whether the API server serves this version.
    pub served: bool,
    /// Storage: whether this is the stored version (exactly one is).
    pub storage: bool,
    /// Deprecated marks the version deprecated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    /// DeprecationWarning returned to clients of a deprecated version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecation_warning: Option<String>,
    /// Schema of the version (openAPIV3Schema), as a CRD version's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<ManagedResourceValidation>,
    /// Subresources (status, scale) of the version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subresources: Option<CustomResourceSubresources>,
    /// AdditionalPrinterColumns of the version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_printer_columns: Vec<CustomResourceColumnDefinition>,
    /// SelectableFields of the version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selectable_fields: Vec<SelectableField>,
}

/// A version's schema.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManagedResourceValidation {
    /// OpenAPIV3Schema validating and pruning the kind's objects.
    #[serde(
        rename = "openAPIV3Schema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "crate::common::opaque_object_schema")]
    pub open_api_v3_schema: Option<serde_json::Value>,
}

/// A connection detail a managed resource publishes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ConnectionDetail {
    /// Name (the key in the connection Secret).
    pub name: String,
    /// Description of the value.
    pub description: String,
}

/// Whether an MRD's CRD is served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ManagedResourceDefinitionState {
    /// The CRD is not served.
    #[default]
    Inactive,
    /// The CRD is served.
    Active,
}

/// Observed state of an MRD: `Established` says whether its CRD is served.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManagedResourceDefinitionStatus {
    /// Conditions: Established.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// Desired state of a ManagedResourceActivationPolicy.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A ManagedResourceActivationPolicy (MRAP) activates the ManagedResourceDefinitions whose names match one of its spec.activate patterns (shell wildcards: `*.aws.m.crossplane.io`, `buckets.s3.*`, or an exact name such as objects.kubernetes.m.crossplane.io). An MRD once activated stays Active when the policy goes; status.activated lists what it activated.",
    group = "apiextensions.crossplane.io",
    version = "v1alpha1",
    kind = "ManagedResourceActivationPolicy",
    status = "ManagedResourceActivationPolicyStatus",
    shortname = "mrap",
    category = "crossplane",
    printcolumn = r#"{"name":"HEALTHY","type":"string","jsonPath":".status.conditions[?(@.type=='Healthy')].status"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedResourceActivationPolicySpec {
    /// Activate lists the MRD names to activate, each an exact name or a
    /// shell wildcard pattern (`*`, `?`, `[a-z]`).
    #[schemars(length(min = 1))]
    pub activate: Vec<String>,
}

/// Observed state of an MRAP.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManagedResourceActivationPolicyStatus {
    /// Conditions: Healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Activated are the MRDs this policy activated, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub activated: Vec<String>,
}

crate::conditioned!(
    ManagedResourceDefinition => ManagedResourceDefinitionStatus,
    ManagedResourceActivationPolicy => ManagedResourceActivationPolicyStatus,
);

impl ManagedResourceActivationPolicy {
    /// Whether one of the policy's patterns matches the MRD named `name`.
    pub fn activates(&self, name: &str) -> bool {
        self.spec.activate.iter().any(|p| pattern_matches(p, name))
    }
}

/// Whether `name` matches the shell pattern `pattern` as Go's
/// `filepath.Match` matches it (upstream's rule): `*` any run of
/// characters other than `/`, `?` one such character, `[...]` a class
/// (`^` or `!` negates, `a-z` ranges, `\\` escapes). A malformed pattern
/// matches nothing. Linear in the name for each token: no pattern can make
/// it backtrack exponentially.
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    let Some(tokens) = tokens(pattern) else {
        return false;
    };
    let name: Vec<char> = name.chars().collect();
    let (mut t, mut n) = (0, 0);
    // The last star seen, and where in the name its match ends for now.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match tokens.get(t) {
            Some(Token::Star) => {
                star = Some((t, n));
                t += 1;
            }
            Some(one) if one.matches(name[n]) => {
                t += 1;
                n += 1;
            }
            _ => {
                // Let the last star take one more character, if it may.
                let Some((st, sn)) = star else {
                    return false;
                };
                if name[sn] == '/' {
                    return false;
                }
                star = Some((st, sn + 1));
                t = st + 1;
                n = sn + 1;
            }
        }
    }
    tokens[t..].iter().all(|x| matches!(x, Token::Star))
}

enum Token {
    Star,
    Any,
    Literal(char),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Token {
    /// Whether this single-character token matches `c`.
    fn matches(&self, c: char) -> bool {
        match self {
            Self::Star => false,
            Self::Any => c != '/',
            Self::Literal(l) => *l == c,
            Self::Class { negated, ranges } => {
                c != '/' && ranges.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negated
            }
        }
    }
}

/// The pattern's tokens, or `None` when it is malformed (an unclosed or
/// empty class, a backwards range, a trailing `\\`).
fn tokens(pattern: &str) -> Option<Vec<Token>> {
    let mut out = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(match c {
            '*' => {
                while chars.peek() == Some(&'*') {
                    chars.next();
                }
                Token::Star
            }
            '?' => Token::Any,
            '\\' => Token::Literal(chars.next()?),
            '[' => {
                let negated = matches!(chars.peek(), Some('^' | '!'));
                if negated {
                    chars.next();
                }
                let mut ranges = Vec::new();
                loop {
                    let c = chars.next()?;
                    if c == ']' && !ranges.is_empty() {
                        break;
                    }
                    let lo = if c == '\\' { chars.next()? } else { c };
                    let mut hi = lo;
                    if chars.peek() == Some(&'-') {
                        chars.next();
                        let e = chars.next()?;
                        hi = if e == '\\' { chars.next()? } else { e };
                        if hi < lo {
                            return None;
                        }
                    }
                    ranges.push((lo, hi));
                }
                Token::Class { negated, ranges }
            }
            c => Token::Literal(c),
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn patterns_match_as_go_filepath_match() {
        for (pattern, name, want) in [
            ("*", "objects.kubernetes.m.crossplane.io", true),
            (
                "objects.kubernetes.m.crossplane.io",
                "objects.kubernetes.m.crossplane.io",
                true,
            ),
            (
                "objects.kubernetes.m.crossplane.io",
                "objects.kubernetes.crossplane.io",
                false,
            ),
            (
                "*.kubernetes.m.crossplane.io",
                "objects.kubernetes.m.crossplane.io",
                true,
            ),
            (
                "*.m.crossplane.io",
                "objects.kubernetes.crossplane.io",
                false,
            ),
            ("buckets.s3.*", "buckets.s3.aws.m.crossplane.io", true),
            ("bucket?.s3.*", "buckets.s3.aws.m.crossplane.io", true),
            ("[a-c]*.s3.*", "buckets.s3.aws.m.crossplane.io", true),
            ("[^a-c]*.s3.*", "buckets.s3.aws.m.crossplane.io", false),
            ("[!x]uckets.*", "buckets.s3", true),
            ("*", "a/b", false),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("", "", true),
            ("", "x", false),
            ("**.io", "x.io", true),
            (
                "*a*a*a*a*a*a*a*a*b",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                false,
            ),
            // Malformed: never matches, never panics.
            ("[", "x", false),
            ("[]", "x", false),
            ("[z-a]", "x", false),
            ("*[", "x", false),
            ("x\\", "x", false),
        ] {
            assert_eq!(pattern_matches(pattern, name), want, "{pattern} ~ {name}");
        }
    }

    #[test]
    fn a_policy_activates_what_any_pattern_matches() {
        let p = ManagedResourceActivationPolicy::new(
            "p",
            ManagedResourceActivationPolicySpec {
                activate: vec![
                    "objects.kubernetes.m.crossplane.io".into(),
                    "*.aws.m.crossplane.io".into(),
                ],
            },
        );
        assert!(p.activates("objects.kubernetes.m.crossplane.io"));
        assert!(p.activates("buckets.aws.m.crossplane.io"));
        assert!(!p.activates("objects.kubernetes.crossplane.io"));
    }

    #[test]
    fn an_upstream_mrd_reads_back_unchanged() {
        let yaml = r#"
apiVersion: apiextensions.crossplane.io/v1alpha1
kind: ManagedResourceDefinition
metadata:
  name: objects.kubernetes.m.crossplane.io
spec:
  group: kubernetes.m.crossplane.io
  names:
    kind: Object
    listKind: ObjectList
    plural: objects
    singular: object
    categories: [crossplane, managed, kubernetes]
  scope: Namespaced
  state: Active
  connectionDetails:
    - name: kubeconfig
      description: credentials
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              x-kubernetes-preserve-unknown-fields: true
      subresources:
        status: {}
      additionalPrinterColumns:
        - name: READY
          type: string
          jsonPath: .status.conditions[?(@.type=='Ready')].status
"#;
        let m: ManagedResourceDefinition = serde_saphyr::from_str(yaml).unwrap();
        let back = serde_json::to_value(&m).ok();
        let want: Option<serde_json::Value> = serde_saphyr::from_str(yaml).ok();
        assert_eq!(back, want);
    }
}
