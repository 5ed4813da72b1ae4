//! Counting requests in a kube-apiserver audit log (`Options::audit`): the
//! server's own record of who asked for what, to check the figures a binary
//! counts with its own client.
//!
//! The log holds JSON lines at level Metadata. The policy testenv writes
//! omits the RequestReceived stage, so a request appears at ResponseComplete
//! (or Panic), and a watch also at ResponseStarted when it opens (its
//! ResponseComplete comes only when it closes, possibly much later). Each
//! request is counted once: a watch when it opens, anything else when it
//! completes; a second event with the same auditID in the same range (the
//! ResponseComplete of a long-running non-watch request) is not counted
//! again.
//!
//! Requests are attributed to `impersonatedUser.username` when present (a
//! binary run as its ServiceAccount by impersonation), else to
//! `user.username`.

use std::{
    collections::{BTreeMap, HashSet},
    fs::File,
    io::{BufReader, Read as _, Seek as _, SeekFrom},
    path::Path,
};

use chrono::{DateTime, Utc};
use serde::Deserialize;

/// One request, as counted.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    /// Who asked: the impersonated user if any, else the authenticated one.
    pub user: String,
    /// The Kubernetes verb: get, list, watch, create, update, patch, delete,
    /// deletecollection.
    pub verb: String,
    /// The resource (`configmaps`, `objects/status`), or for a non-resource
    /// request its path (`/api`, `/healthz`).
    pub resource: String,
}

/// How many requests of each (user, verb, resource).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts(pub BTreeMap<Request, u64>);

impl Counts {
    /// All requests by `user`.
    pub fn total(&self, user: &str) -> u64 {
        self.of(user).map(|(_, n)| n).sum()
    }

    /// Requests by `user`, by verb.
    pub fn by_verb(&self, user: &str) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (r, n) in self.of(user) {
            *out.entry(r.verb.clone()).or_default() += n;
        }
        out
    }

    /// Requests by `user`, by "verb resource" (e.g. "patch objects/status").
    pub fn by_verb_and_resource(&self, user: &str) -> BTreeMap<String, u64> {
        self.of(user)
            .map(|(r, n)| (format!("{} {}", r.verb, r.resource), n))
            .collect()
    }

    /// Requests by user, every user.
    pub fn by_user(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (r, n) in &self.0 {
            *out.entry(r.user.clone()).or_default() += n;
        }
        out
    }

    fn of<'a>(&'a self, user: &'a str) -> impl Iterator<Item = (&'a Request, u64)> + 'a {
        self.0
            .iter()
            .filter(move |(r, _)| r.user == user)
            .map(|(r, n)| (r, *n))
    }
}

/// The end of the last complete line of the log at `path` (0 when it does
/// not exist yet): take one before and one after a phase and count between
/// them with [`count`].
pub fn end(path: &Path) -> std::io::Result<u64> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    // Back up over a line the server is still writing.
    let mut pos = len;
    let mut buf = [0u8; 4096];
    while pos > 0 {
        let step = pos.min(buf.len() as u64);
        file.seek(SeekFrom::Start(pos - step))?;
        let chunk = &mut buf[..step as usize];
        file.read_exact(chunk)?;
        if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
            return Ok(pos - step + i as u64 + 1);
        }
        pos -= step;
    }
    Ok(0)
}

/// The requests logged between byte offsets `from` and `to` (both from
/// [`end`]).
pub fn count(path: &Path, from: u64, to: u64) -> std::io::Result<Counts> {
    tally(between_offsets(path, from, to)?, |_| true)
}

/// The log at `path` from byte offset `from` to `to`.
fn between_offsets(path: &Path, from: u64, to: u64) -> std::io::Result<impl std::io::BufRead> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(from))?;
    Ok(BufReader::new(file.take(to.saturating_sub(from))))
}

/// An audit timestamp (RFC 3339), if it is one.
fn time(t: Option<&str>) -> Option<DateTime<Utc>> {
    t.and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// The requests the server received between `from` and `to`
/// (requestReceivedTimestamp, inclusive of `from`, exclusive of `to`).
pub fn count_between(
    path: &Path,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> std::io::Result<Counts> {
    let reader = BufReader::new(File::open(path)?);
    tally(reader, |e| {
        time(e.received.as_deref()).is_some_and(|t| t >= from && t < to)
    })
}

fn tally(
    reader: impl std::io::BufRead,
    keep: impl FnMut(&Event) -> bool,
) -> std::io::Result<Counts> {
    let mut counts = Counts::default();
    each_counted(reader, keep, |event| {
        *counts.0.entry(event.request()).or_default() += 1;
    })?;
    Ok(counts)
}

/// Calls `f` with each event of `reader` that a request is counted at
/// ([`Event::counts`]) and `keep` wants, once per request.
fn each_counted(
    reader: impl std::io::BufRead,
    mut keep: impl FnMut(&Event) -> bool,
    mut f: impl FnMut(Event),
) -> std::io::Result<()> {
    let mut seen = HashSet::new();
    for line in reader.lines() {
        let Some(event) = parse_line(&line?) else {
            continue;
        };
        if event.counts() && keep(&event) && seen.insert(event.audit_id.clone()) {
            f(event);
        }
    }
    Ok(())
}

/// The fields of an audit event that counting reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    #[serde(rename = "auditID", default)]
    audit_id: String,
    #[serde(default)]
    stage: String,
    #[serde(default)]
    verb: String,
    #[serde(rename = "requestURI", default)]
    request_uri: String,
    #[serde(default)]
    user: UserInfo,
    #[serde(default)]
    impersonated_user: Option<UserInfo>,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(rename = "requestReceivedTimestamp", default)]
    received: Option<String>,
    #[serde(rename = "stageTimestamp", default)]
    stage_at: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct UserInfo {
    #[serde(default)]
    username: String,
}

#[derive(Debug, Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: Option<String>,
}

impl Event {
    /// Whether this event is the one a request is counted at: a watch when
    /// it opens, anything else when it completes (or panics).
    fn counts(&self) -> bool {
        match self.stage.as_str() {
            "ResponseStarted" => true,
            "ResponseComplete" | "Panic" => self.verb != "watch",
            _ => false,
        }
    }

    fn request(&self) -> Request {
        let user = self
            .impersonated_user
            .as_ref()
            .filter(|u| !u.username.is_empty())
            .unwrap_or(&self.user)
            .username
            .clone();
        let resource = match &self.object_ref {
            Some(r) if !r.resource.is_empty() => match &r.subresource {
                Some(sub) if !sub.is_empty() => format!("{}/{sub}", r.resource),
                _ => r.resource.clone(),
            },
            _ => self
                .request_uri
                .split('?')
                .next()
                .unwrap_or_default()
                .to_owned(),
        };
        Request {
            user,
            verb: self.verb.clone(),
            resource,
        }
    }
}

/// One line of the log, or None when it is not an audit event.
pub fn parse_line(line: &str) -> Option<Event> {
    serde_json::from_str(line).ok()
}

/// One request that completed, with when the server received it and how
/// long it took to answer: what a timeline of a phase is made of.
#[derive(Clone, Debug)]
pub struct Timed {
    /// Who asked for what, as counted.
    pub request: Request,
    /// Whether it was a dry run (`dryRun=All`): nothing was stored.
    pub dry_run: bool,
    /// When the server received it.
    pub received: DateTime<Utc>,
    /// Received to answered, in milliseconds.
    pub took_ms: f64,
}

/// The requests (watches left out) that completed between byte offsets
/// `from` and `to` (both from [`end`]), each once, as the log has them.
pub fn timed(path: &Path, from: u64, to: u64) -> std::io::Result<Vec<Timed>> {
    let mut out = Vec::new();
    each_counted(
        between_offsets(path, from, to)?,
        |e| e.verb != "watch",
        |event| {
            let received = time(event.received.as_deref());
            let answered = time(event.stage_at.as_deref());
            if let (Some(received), Some(answered)) = (received, answered) {
                out.push(Timed {
                    dry_run: event.request_uri.contains("dryRun=All"),
                    request: event.request(),
                    received,
                    took_ms: (answered - received).num_microseconds().unwrap_or(0) as f64 / 1000.0,
                });
            }
        },
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str, stage: &str, verb: &str, user: &str, imp: Option<&str>, res: &str) -> String {
        let imp = imp
            .map(|u| format!(r#","impersonatedUser":{{"username":"{u}"}}"#))
            .unwrap_or_default();
        let (resource, sub) = res.split_once('/').unwrap_or((res, ""));
        format!(
            r#"{{"kind":"Event","level":"Metadata","auditID":"{id}","stage":"{stage}","requestURI":"/api/v1/x?watch=true","verb":"{verb}","user":{{"username":"{user}"}}{imp},"objectRef":{{"resource":"{resource}","subresource":"{sub}"}},"requestReceivedTimestamp":"2026-01-01T00:00:0{}.000000Z"}}"#,
            id.len() % 10
        )
    }

    fn tally_str(text: &str) -> Counts {
        tally(text.as_bytes(), |_| true).unwrap()
    }

    #[test]
    fn a_request_is_counted_once_and_a_watch_when_it_opens() {
        let log = [
            line("a", "ResponseComplete", "get", "bob", None, "configmaps"),
            line("b", "ResponseStarted", "watch", "bob", None, "configmaps"),
            // The same watch closing, and one that opened before the range.
            line("b", "ResponseComplete", "watch", "bob", None, "configmaps"),
            line("c", "ResponseComplete", "watch", "bob", None, "configmaps"),
            // A long-running non-watch request: started and completed, once.
            line("d", "ResponseStarted", "create", "bob", None, "pods/exec"),
            line("d", "ResponseComplete", "create", "bob", None, "pods/exec"),
            "not json".to_owned(),
        ]
        .join("\n");
        let counts = tally_str(&log);
        assert_eq!(counts.total("bob"), 3);
        assert_eq!(
            counts.by_verb_and_resource("bob"),
            [
                ("create pods/exec".to_owned(), 1),
                ("get configmaps".to_owned(), 1),
                ("watch configmaps".to_owned(), 1),
            ]
            .into()
        );
    }

    #[test]
    fn an_impersonated_request_counts_for_the_impersonated_user() {
        let sa = "system:serviceaccount:crossplane-system:object-provider";
        let log = [
            line(
                "a",
                "ResponseComplete",
                "patch",
                "admin",
                Some(sa),
                "objects/status",
            ),
            line("b", "ResponseComplete", "patch", "admin", None, "objects"),
        ]
        .join("\n");
        let counts = tally_str(&log);
        assert_eq!(counts.by_verb(sa), [("patch".to_owned(), 1)].into());
        assert_eq!(counts.total("admin"), 1);
        assert_eq!(counts.by_user().len(), 2);
    }

    #[test]
    fn offsets_split_the_log_between_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        assert_eq!(end(&path).unwrap(), 0);
        let first = line("a", "ResponseComplete", "get", "bob", None, "configmaps");
        let second = line("b", "ResponseComplete", "list", "bob", None, "configmaps");
        // The second line is still being written: no newline yet.
        std::fs::write(&path, format!("{first}\n{second}")).unwrap();
        let mid = end(&path).unwrap();
        assert_eq!(mid, first.len() as u64 + 1);
        std::fs::write(&path, format!("{first}\n{second}\n")).unwrap();
        let last = end(&path).unwrap();
        assert_eq!(
            count(&path, 0, mid).unwrap().by_verb("bob"),
            [("get".to_owned(), 1)].into()
        );
        assert_eq!(
            count(&path, mid, last).unwrap().by_verb("bob"),
            [("list".to_owned(), 1)].into()
        );
    }

    #[test]
    fn a_time_window_counts_what_was_received_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        // Timestamps :01 (id "a") and :03 (id "abc").
        let log = [
            line("a", "ResponseComplete", "get", "bob", None, "configmaps"),
            line("abc", "ResponseComplete", "list", "bob", None, "configmaps"),
        ]
        .join("\n");
        std::fs::write(&path, log).unwrap();
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let counts = count_between(
            &path,
            at("2026-01-01T00:00:02Z"),
            at("2026-01-01T00:00:04Z"),
        )
        .unwrap();
        assert_eq!(counts.by_verb("bob"), [("list".to_owned(), 1)].into());
    }
}
