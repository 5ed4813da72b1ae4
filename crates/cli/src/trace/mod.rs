//! Builds a trace's tree: the root the user named and everything it is
//! made of, each kind's tree in its own file, read through a
//! [`Source`](crate::source::Source).

mod app;
mod object;
mod parts;
mod provider;
mod stack;
mod summary;

use crate::{
    node::Node,
    source::Source,
    target::{Error, Kind, Target},
};

/// Where things are that the tree does not name.
#[derive(Clone, Debug)]
pub struct Places {
    /// The namespace a namespaced root is in.
    pub namespace: String,
    /// The namespace Provider runtimes run in.
    pub system_namespace: String,
}

/// The tree of `target`; a one-line error when there is no such object.
pub async fn build<S: Source>(s: &S, target: &Target, at: &Places) -> Result<Node, Error> {
    let ns = at.namespace.as_str();
    let name = target.name.as_str();
    let found = match target.kind {
        Kind::Application => app::trace(s, ns, name).await,
        Kind::Provider => provider::trace(s, name, &at.system_namespace).await,
        Kind::ExtensionRequest => stack::trace(s, ns, name).await,
        Kind::Object => object::trace(s, name).await,
    };
    found.ok_or_else(|| Error::NotFound {
        kind: target.kind.kind(),
        name: name.to_owned(),
        where_: if target.kind.namespaced() {
            format!(" in namespace {ns}")
        } else {
            String::new()
        },
    })
}
