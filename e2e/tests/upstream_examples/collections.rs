//! The collections of an example file, compared side by side: each
//! collection's (Synced, Ready) and its Objects (upstream's names, their
//! state, the template's labels and annotations, what each observes).

use std::collections::BTreeMap;

use serde_json::Value;

use super::sides::on_both;
use super::{Side, condition, settled};

/// The label upstream's (and ours') collection puts on its Objects.
const MEMBERSHIP: &str = types::kubernetes::v1alpha1::COLLECTION_MEMBERSHIP_LABEL;

/// A collection of a file: its group, namespace, name, and its template's
/// labels and annotations.
struct Collection {
    group: String,
    namespace: Option<String>,
    name: String,
    template: Value,
}

fn collections_of(docs: &[Value]) -> Vec<Collection> {
    let text = |d: &Value, p: &str| d.pointer(p).and_then(Value::as_str).map(str::to_owned);
    docs.iter()
        .filter(|d| d["kind"] == "ObservedObjectCollection")
        .map(|d| Collection {
            group: text(d, "/apiVersion")
                .and_then(|v| v.split_once('/').map(|(g, _)| g.to_owned()))
                .unwrap_or_default(),
            namespace: text(d, "/metadata/namespace"),
            name: text(d, "/metadata/name").unwrap_or_default(),
            template: d
                .pointer("/spec/objectTemplate/metadata")
                .cloned()
                .unwrap_or(Value::Null),
        })
        .collect()
}

impl Collection {
    /// kubectl's arguments for `resource` in the collection's namespace.
    fn args<'a>(&'a self, resource: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![resource];
        args.extend(rest);
        if let Some(ns) = &self.namespace {
            args.extend(["-n", ns.as_str()]);
        }
        args
    }

    /// The collection on `side`: (Synced, Ready) once settled.
    fn state(&self, side: Side) -> Option<(String, String)> {
        let resource = format!("observedobjectcollections.{}", self.group);
        let c = side.get_json(&self.args(&resource, &[&self.name]))?;
        let synced = condition(&c, "Synced")?;
        let ready = condition(&c, "Ready").unwrap_or_else(|| "Unknown".to_owned());
        (ready == "True" || synced == "False").then_some((synced, ready))
    }

    /// Its Objects on `side`, by name: what a user would compare of each
    /// (None while one has not settled).
    fn members(&self, side: Side) -> Option<BTreeMap<String, Value>> {
        let resource = format!("objects.{}", self.group);
        let selector = format!("{MEMBERSHIP}={}", self.name);
        let list = side.get_json(&self.args(&resource, &["-l", &selector]))?;
        let mut out = BTreeMap::new();
        for o in list["items"].as_array()? {
            let name = o.pointer("/metadata/name")?.as_str()?.to_owned();
            let has_all = |at: &str, want: &Value| {
                want.as_object().into_iter().flatten().all(|(k, v)| {
                    o.pointer(&format!("/metadata/{at}")).and_then(|m| m.get(k)) == Some(v)
                })
            };
            let manifest = o.pointer("/spec/forProvider/manifest")?;
            let essence = serde_json::json!({
                "state": settled(o)?,
                "policies": o.pointer("/spec/managementPolicies"),
                "templateLabels": has_all("labels", &self.template["labels"]),
                "templateAnnotations": has_all("annotations", &self.template["annotations"]),
                "observes": [manifest["kind"], manifest.pointer("/metadata/namespace"), manifest.pointer("/metadata/name")],
            });
            out.insert(name, essence);
        }
        Some(out)
    }
}

/// How the collections of `file` (its documents `docs`, applied to both
/// sides) differ between the sides (empty: they do not).
pub fn compare_collections(file: &str, docs: &[Value]) -> Vec<String> {
    let mut differences = Vec::new();
    for c in collections_of(docs) {
        let states = on_both(
            &format!(
                "{file}: collection {} to settle alike on both sides",
                c.name
            ),
            |side| c.state(side),
        );
        if let Err((mine, theirs)) = states {
            differences.push(format!(
                "{file}: collection {}: (Synced, Ready) ours {mine:?}, upstream's {theirs:?}",
                c.name
            ));
            continue;
        }
        // A settled collection has made its Objects; each settles next.
        let members = match on_both(
            &format!(
                "{file}: collection {}'s Objects alike on both sides",
                c.name
            ),
            |side| c.members(side),
        ) {
            Ok(members) => members,
            Err((mine, theirs)) => {
                differences.push(format!(
                    "{file}: collection {}: Objects ours {mine:?}, upstream's {theirs:?}",
                    c.name
                ));
                mine
            }
        };
        let count = members.len();
        eprintln!("{file}: collection {}: {count} Objects", c.name);
    }
    differences
}
