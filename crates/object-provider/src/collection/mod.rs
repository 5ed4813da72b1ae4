//! The ObservedObjectCollection controller (upstream provider-kubernetes'
//! `observedobjectcollection` reconciler): for every object of a kind that
//! matches a label selector in the cluster a config reaches, one
//! observe-only Object, made as matches appear and deleted as they go, on
//! the shared reconcile skeleton (runtime::reconciler). One controller
//! serves both kinds of collection ([`CollectionKind`]): a cluster one
//! makes cluster v1alpha2 Objects, a namespaced one makes namespaced
//! Objects in its own namespace.
//!
//! A namespaced collection whose config reaches the control cluster with
//! the provider's own identity (InjectedIdentity) looks only in its own
//! namespace, as its Objects may only observe there: another namespace or
//! a cluster-scoped kind is refused before any request, naming the field,
//! unless its ClusterProviderConfig says `spec.reach: Cluster`.
//!
//! Matches are found with a LIST of the kind in the target (metadata only,
//! label-selected, paged; the kind resolved by the target's cached
//! discovery), at every --poll-interval, as upstream does. Not a watch
//! through runtime::watches: those answer reads of objects a reconcile
//! names and wake the dependents that read an object that changed; a
//! collection asks for "every object matching a selector", objects no
//! reconcile has named yet, which they do not serve. A membership change is
//! therefore seen within one poll interval.
//!
//! The collection's own Objects are read from the Object controller's
//! cache (no request), and only what differs is written: a missing or
//! changed member is server-side applied (the fields here are the
//! collection's; the Object controller's finalizer and labels stay its
//! own), a member whose match is gone is deleted. A steady state costs one
//! LIST of the target per poll and no write. The ProviderConfig is reached
//! through the Objects' [`Reach`], so both share clients and Secret reads.
//!
//! No finalizer: each Object carries a controller owner reference to its
//! collection, so the garbage collector deletes them with it; each Object
//! then goes as its management policy says (observe-only: the objects it
//! observed stay).

pub mod kind;
mod members;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams},
    runtime::{controller::Action, reflector::Store, watcher},
};
use runtime::{
    conditions,
    controller::{Runtime, trim},
    events::ReconcileError,
    managed::{self, RemoteFailure, RequestFailed},
    reconciler::{self, CONTROL_REQUEST_FAILED, Cleanup, ControlError, Reconciler, Skeleton},
    remote::RemoteCluster,
};
use types::kubernetes::v1alpha1::{COLLECTION_MEMBERSHIP_LABEL, ObservedObjectCollectionStatus};

use crate::object::{self, Reach, configs};
use kind::CollectionKind;
use members::{Match, Member};

/// Name of the cluster collections' controller in metrics and events.
pub const CONTROLLER: &str = "observedobjectcollection";

/// Name of the namespaced collections' controller.
pub const NAMESPACED_CONTROLLER: &str = "namespaced-observedobjectcollection";

/// The field manager of the collection's writes to its Objects (upstream's).
const FIELD_MANAGER: &str = "kubernetes.crossplane.io/observed-object-collection-controller";

/// Writes to Objects in flight at once for one collection: a hundred new
/// matches are made in a few round trips without one collection taking
/// the control cluster's whole request budget.
const WRITES_AT_ONCE: usize = 8;

/// Objects per page of the LIST of matches, so that a large kind is read
/// in bounded answers.
const PAGE: u32 = 500;

/// How soon a collection waiting for an Object of its own to be gone (a
/// match that came back while its Object was being deleted) looks again.
const WAITING_RECHECK: Duration = Duration::from_secs(2);

/// The field a user fixes when the kind or selector is wrong.
const FIELD: &str = "spec.observeObjects";

/// The fields naming where a confined collection may not look.
const NAMESPACE_FIELD: &str = "spec.observeObjects.namespace";
const KIND_FIELD: &str = "spec.observeObjects.kind";

/// Why reconciling an ObservedObjectCollection failed; each message says
/// what to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Its ProviderConfig's cluster could not be reached (the
    /// ProviderConfig or its credentials are missing or unusable), in the
    /// Objects' words.
    #[error(transparent)]
    Target(#[from] object::Error),
    /// The target does not serve the kind, refused or failed the LIST, or
    /// did not answer in time.
    #[error(transparent)]
    Remote(RemoteFailure),
    /// spec.observeObjects.selector cannot be written as a selector.
    #[error("{0}")]
    InvalidSelector(String),
    /// A request to the control cluster failed.
    #[error("failed to {0}")]
    Control(String, #[source] Box<kube::Error>),
}

runtime::remote_failure_from!(Error::Remote);

impl From<ControlError> for Error {
    fn from(e: ControlError) -> Self {
        Error::Control(e.what.to_owned(), e.source)
    }
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Target(e) => e.category(),
            Error::Remote(e) => e.category(&object::REASONS),
            Error::InvalidSelector(_) => "InvalidSelector",
            Error::Control(..) => CONTROL_REQUEST_FAILED,
        }
    }

    fn retry_within(&self) -> Option<Duration> {
        match self {
            Error::Target(e) => e.retry_within(),
            Error::Remote(e) => e.retry_within(),
            _ => None,
        }
    }
}

impl Error {
    fn control(what: String, source: kube::Error) -> Self {
        Error::Control(what, Box::new(source))
    }
}

/// The collection reconciler: what its reconciles share.
struct Collections<C: CollectionKind> {
    rt: Runtime,
    skeleton: Skeleton,
    reach: Reach,
    /// The Object controller's cache.
    objects: Store<C::Member>,
}

impl<C: CollectionKind> Collections<C> {
    /// The Objects of collection `c` that it controls (by owner `uid`),
    /// from the Object controller's cache, with their manifests opened.
    fn members(&self, c: &C, uid: &str) -> Vec<C::Member> {
        let (name, namespace) = (c.name_any(), c.namespace());
        self.objects
            .state()
            .iter()
            .filter(|o| {
                o.labels()
                    .get(COLLECTION_MEMBERSHIP_LABEL)
                    .map(String::as_str)
                    == Some(name.as_str())
                    && o.namespace() == namespace
                    && o.owner_references()
                        .iter()
                        .any(|r| r.uid == uid && r.controller == Some(true))
            })
            .map(|o| object::cached::opened(o.as_ref()))
            .collect()
    }

    /// The Objects of `c`'s members, in its namespace if it has one.
    fn member_api(&self, c: &C) -> Api<DynamicObject> {
        let kind = ApiResource::erase::<C::Member>(&());
        let client = self.rt.client.clone();
        match c.namespace() {
            Some(ns) => Api::namespaced_with(client, &ns, &kind),
            None => Api::all_with(client, &kind),
        }
    }

    /// Server-side applies each of `members`, a few at a time.
    async fn apply_all(
        &self,
        members: &[&Member],
        owner: &OwnerReference,
        c: &C,
    ) -> Result<(), Error> {
        let api = self.member_api(c);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        // Owned futures: a stream of closures borrowing them would not be
        // Send for every lifetime the controller's future needs.
        let writes: Vec<_> = members
            .iter()
            .map(|m| {
                let (api, params) = (api.clone(), params.clone());
                let (name, body) = (m.name.clone(), members::body(m, owner, c));
                async move {
                    api.patch(&name, &params, &Patch::Apply(&body))
                        .await
                        .map(drop)
                        .map_err(|e| Error::control(format!("apply Object {name}"), e))
                }
            })
            .collect();
        all_of(writes).await
    }

    /// Deletes the Objects `names`, a few at a time; one already gone is
    /// fine.
    async fn delete_all(&self, names: &[String], c: &C) -> Result<(), Error> {
        let api = self.member_api(c);
        let deletes: Vec<_> = names
            .iter()
            .map(|name| {
                let (api, name) = (api.clone(), name.clone());
                async move {
                    match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => Ok(()),
                        Err(e) if managed::not_found(&e) => Ok(()),
                        Err(e) => Err(Error::control(format!("delete Object {name}"), e)),
                    }
                }
            })
            .collect();
        all_of(deletes).await
    }
}

/// Runs `work`, [`WRITES_AT_ONCE`] at a time; the first failure stops it.
async fn all_of(work: Vec<impl Future<Output = Result<(), Error>>>) -> Result<(), Error> {
    futures::stream::iter(work)
        .buffer_unordered(WRITES_AT_ONCE)
        .try_collect::<Vec<()>>()
        .await
        .map(drop)
}

/// The objects in `cluster` that `c` selects (`selector`, in the API's
/// syntax), only in namespace `confined` if it is set. `target` names the
/// cluster in messages.
async fn matching<C: CollectionKind>(
    cluster: &RemoteCluster,
    target: &str,
    c: &C,
    selector: Option<&str>,
    confined: Option<&str>,
) -> Result<Vec<Match>, Error> {
    let what = c.criteria();
    let asked = what.namespace.as_deref().filter(|n| !n.is_empty());
    if let (Some(own), Some(asked)) = (confined, asked)
        && own != asked
    {
        let what = format!("{} objects in namespace {asked}", what.kind);
        return Err(outside(NAMESPACE_FIELD, own, what));
    }
    let namespace = asked.or(confined);
    let located = managed::locate(
        cluster,
        target,
        &what.api_version,
        &what.kind,
        namespace,
        FIELD,
    )
    .await?;
    if let Some(own) = confined
        && located.namespace.is_none()
    {
        let what = format!("{} objects (cluster-scoped)", what.kind);
        return Err(outside(KIND_FIELD, own, what));
    }
    // `locate` scopes a namespaced kind to "default" when no namespace is
    // given; a collection without one looks in every namespace.
    let api = match (namespace, &located.namespace) {
        (Some(_), Some(_)) => located.api,
        _ => Api::all_with(cluster.client.clone(), &located.resource),
    };
    let mut params = ListParams::default().limit(PAGE);
    if let Some(s) = selector {
        params = params.labels(s);
    }
    let mut found = Vec::new();
    loop {
        let page = api.list_metadata(&params).await.map_err(|e| {
            let what = format!("listing {} {}", what.kind, selector.unwrap_or("(all)"));
            RequestFailed::new(what, target, FIELD, e)
        })?;
        found.extend(page.items.into_iter().filter_map(|o| {
            Some(Match {
                name: o.metadata.name?,
                namespace: o.metadata.namespace,
            })
        }));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(found),
        }
    }
}

/// A confined collection looking outside its namespace: `field` names
/// `what`, which is outside `namespace`.
fn outside(field: &str, namespace: &str, what: String) -> Error {
    let e = object::Error::OutsideNamespace(field.to_owned(), namespace.to_owned(), what);
    Error::Target(e)
}

/// Whether the collection was last reconciled successfully at its current
/// generation: its Objects then hold only what its spec says, and one that
/// has every field it should is up to date.
fn synced_at_generation<C: CollectionKind>(c: &C) -> bool {
    let status = c.status();
    status
        .and_then(|s| conditions::get(&s.conditions, conditions::TYPE_SYNCED))
        .is_some_and(|s| s.status == "True" && s.observed_generation == c.meta().generation)
}

impl<C: CollectionKind> Reconciler for Collections<C> {
    type Object = C;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.skeleton
    }

    /// Members are read from the Objects' cache and the ProviderConfig
    /// from the configs' cache.
    async fn ready(&self) -> bool {
        runtime::controller::cache_ready(&self.objects).await && self.reach.configs.ready().await
    }

    /// None: the Objects go with the collection by garbage collection.
    fn finalizer(&self) -> Option<&'static str> {
        None
    }

    async fn apply(
        &self,
        c: &Arc<C>,
        status: &mut ObservedObjectCollectionStatus,
    ) -> Result<Action, Error> {
        let name = c.name_any();
        status.membership_label =
            BTreeMap::from([(COLLECTION_MEMBERSHIP_LABEL.to_owned(), name.clone())]);
        status.observed_generation = c.meta().generation;
        let Some(owner) = c.controller_owner_ref(&()) else {
            // Only an object never stored has no UID.
            return Ok(Action::await_change());
        };
        let selector = members::selector(&c.criteria().selector).map_err(Error::InvalidSelector)?;
        let config = c.config();
        let cluster = self.reach.connect(&config).await?;
        let confined = (self.reach.configs.get(&config))
            .and_then(|pc| configs::confined_to(c.namespace(), &pc));
        let target = object::target_named(&config);
        let c: &C = c;
        let listing = matching(
            &cluster,
            &target,
            c,
            selector.as_deref(),
            confined.as_deref(),
        );
        let matches = self.rt.clusters.call(&target, &cluster, listing).await?;
        let wanted: Vec<Member> = matches.iter().map(|m| members::member(c, m)).collect();
        let existing = self.members(c, &owner.uid);
        let force = !synced_at_generation(c);
        let plan = members::plan(&wanted, &existing, &owner.uid, &config, force);
        self.apply_all(&plan.apply, &owner, c).await?;
        self.delete_all(&plan.delete, c).await?;
        let (made, gone) = (plan.apply.len(), plan.delete.len());
        if made + gone > 0 {
            let note = format!(
                "{} matching objects: applied {made} Objects, deleted {gone} whose object no longer matches",
                wanted.len()
            );
            let events = &self.skeleton.reporting.events;
            events
                .normal(&c.object_ref(&()), "MembersChanged", note)
                .await;
        }
        conditions::set(
            &mut status.conditions,
            conditions::available(),
            &conditions::now(),
        );
        let poll = reconciler::jittered(self.rt.args.poll_interval, c);
        if plan.waiting > 0 {
            return Ok(Action::requeue(poll.min(WAITING_RECHECK)));
        }
        Ok(Action::requeue(poll))
    }

    async fn cleanup(
        &self,
        _c: &Arc<C>,
        _status: &mut ObservedObjectCollectionStatus,
    ) -> Result<Cleanup, Error> {
        // Without a finalizer there is nothing to hold a deletion for.
        Ok(Cleanup::Done)
    }
}

/// The controller of the collections of kind `C`, named `name`: `reach`
/// connects to their configs' clusters, `objects` is the cache of the
/// Object controller of their members' kind.
pub fn controller<C: CollectionKind>(
    rt: &Runtime,
    name: &'static str,
    reach: Reach,
    objects: Store<C::Member>,
) -> impl Future<Output = ()> {
    let ctx = Arc::new(Collections::<C> {
        rt: rt.clone(),
        skeleton: Skeleton::new(rt, name),
        reach,
        objects,
    });
    let controller = trim::controller_of_own_status(
        Api::<C>::all(rt.client.clone()),
        watcher::Config::default(),
        trim::nothing_else,
    )
    .with_config(rt.controller_config())
    .graceful_shutdown_on(rt.shutdown());
    reconciler::run(controller, ctx)
}
