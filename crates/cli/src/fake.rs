//! Unit tests' [`Source`]: objects held in memory, some kinds forbidden.

use std::collections::{BTreeMap, BTreeSet};

use kube::discovery::ApiResource;
use serde_json::Value;

use crate::source::{Got, Refused, Source, what};

#[derive(Default)]
pub struct Fake {
    objects: BTreeMap<(String, String), Vec<Value>>,
    forbidden: BTreeSet<(String, String)>,
}

impl Fake {
    /// Holds `obj` as an object of `kind` in `api_version`.
    pub fn put(&mut self, api_version: &str, kind: &str, mut obj: Value) {
        if let Some(o) = obj.as_object_mut() {
            o.insert("apiVersion".into(), Value::String(api_version.to_owned()));
            o.insert("kind".into(), Value::String(kind.to_owned()));
        }
        self.objects
            .entry((api_version.to_owned(), kind.to_owned()))
            .or_default()
            .push(obj);
    }

    /// Every read of `kind` is forbidden.
    pub fn forbid(&mut self, api_version: &str, kind: &str) {
        self.forbidden
            .insert((api_version.to_owned(), kind.to_owned()));
    }

    fn key(r: &ApiResource) -> (String, String) {
        (r.api_version.clone(), r.kind.clone())
    }

    fn matches(o: &Value, ns: Option<&str>, selector: Option<&str>) -> bool {
        let in_ns = ns
            .is_none_or(|ns| o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns));
        let labelled = selector.is_none_or(|s| {
            s.split(',').all(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                o.pointer("/metadata/labels")
                    .and_then(|l| l.get(k))
                    .and_then(Value::as_str)
                    == Some(v)
            })
        });
        in_ns && labelled
    }
}

impl Source for Fake {
    async fn get(&self, r: &ApiResource, ns: Option<&str>, name: &str) -> Got {
        if self.forbidden.contains(&Self::key(r)) {
            return Got::Forbidden(what(r, ns));
        }
        self.objects
            .get(&Self::key(r))
            .into_iter()
            .flatten()
            .find(|o| {
                Self::matches(o, ns, None)
                    && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
            })
            .map_or(Got::Missing, |o| Got::Found(o.clone()))
    }

    async fn list(
        &self,
        r: &ApiResource,
        ns: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<Value>, Refused> {
        if self.forbidden.contains(&Self::key(r)) {
            return Err(Refused::Forbidden(what(r, ns)));
        }
        Ok(self
            .objects
            .get(&Self::key(r))
            .into_iter()
            .flatten()
            .filter(|o| Self::matches(o, ns, selector))
            .cloned()
            .collect())
    }

    async fn resolve(&self, api_version: &str, kind: &str) -> Result<ApiResource, Refused> {
        if kind == "Unserved" {
            return Err(Refused::Failed(format!(
                "the API server serves no {kind} in {api_version}"
            )));
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        Ok(ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            plural: format!("{}s", kind.to_ascii_lowercase()),
        })
    }
}
