//! `--watch`: trace once, then watch every kind (and namespace) the trace
//! read, and trace and redraw after changes (debounced), only when what is
//! printed changed. Kinds a later trace reads for the first time (a pod
//! that appeared) are watched from then on.

use std::{collections::BTreeSet, io::IsTerminal as _, io::Write as _, time::Duration};

use futures::StreamExt as _;
use kube::{
    Api,
    api::DynamicObject,
    runtime::{WatchStreamExt as _, watcher},
};
use tokio::sync::mpsc;

use crate::{
    render::{Output, render},
    source::{Kube, Read},
    target::Target,
    trace::{Places, build},
};

/// How long changes are gathered before one redraw: a rollout changes a
/// Deployment, a ReplicaSet's pods and a revision within moments.
const DEBOUNCE: Duration = Duration::from_millis(300);

/// Traces and redraws until interrupted.
pub async fn watch(
    kube: &Kube,
    target: &Target,
    at: &Places,
    output: Output,
) -> anyhow::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let mut watching = BTreeSet::new();
    let mut last = String::new();
    loop {
        let out = match build(kube, target, at).await {
            Ok(root) => render(&root, output),
            Err(e) => format!("{e}\n"),
        };
        if out != last {
            draw(&out, output)?;
            last = out;
        }
        for read in kube.read() {
            if watching.insert(read.clone()) {
                start(kube, read, tx.clone());
            }
        }
        tokio::select! {
            got = rx.recv() => if got.is_none() { return Ok(()) },
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {}
    }
}

/// Prints `out`: over the last one on a terminal, after it otherwise.
fn draw(out: &str, output: Output) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    if stdout.is_terminal() && output != Output::Json {
        // Clear the screen and go home.
        write!(stdout, "\x1b[2J\x1b[H")?;
    }
    write!(stdout, "{out}")?;
    if !stdout.is_terminal() {
        writeln!(stdout)?;
    }
    stdout.flush()
}

/// Watches `read`, sending on `tx` at every event. A watch the user may
/// not open (the tree says forbidden already) backs off and retries.
fn start(kube: &Kube, read: Read, tx: mpsc::UnboundedSender<()>) {
    let r = read.resource();
    let api: Api<DynamicObject> = match &read.namespace {
        Some(ns) => Api::namespaced_with(kube.client().clone(), ns, &r),
        None => Api::all_with(kube.client().clone(), &r),
    };
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            if event.is_ok() && tx.send(()).is_err() {
                return;
            }
        }
    });
}
