//! A dependency that must move: a package's new version needs a newer
//! version of a dependency the package-manager installed. It moves to the
//! newest version every installed dependent accepts, make-before-break,
//! with no failed read of its kinds; when another dependent pins it,
//! nothing moves and both constraints are named.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use super::*;

/// The Provider that installs `repository`, if any.
fn installing(repository: &str) -> Option<Value> {
    get_json(&["providers.pkg.crossplane.io"])?["items"]
        .as_array()?
        .iter()
        .find(|p| {
            p["spec"]["package"]
                .as_str()
                .is_some_and(|s| s.starts_with(&format!("{repository}:")))
        })
        .cloned()
}

#[test]
fn a_dependency_moves_up_when_every_dependent_accepts_and_stays_when_one_pins_it() {
    let e = env();
    let unique = testenv::unique_name("move");
    let repo = |n: &str| format!("{}/test/{unique}-{n}", e.registry.address);
    // One API group per package, the same for each of its versions.
    let groups: std::collections::BTreeMap<&str, String> = ["b", "a", "c", "pb", "pa", "pc"]
        .into_iter()
        .map(|n| (n, group(&format!("move{n}"))))
        .collect();
    let push = |n: &str, tag: &str, kind: &str, extra: &str| {
        let dir = package_dir_with(n, tag, &crds_of(&[test_crd(&groups[n], kind)]), extra);
        xpkg_push(&dir, &format!("{}:{tag}", repo(n)), None);
    };
    let needs =
        |n: &str, dependency: &str, range: &str| meta_with_dependency(n, &repo(dependency), range);

    // A and C depend on B (>= v1); B is installed at v1.0.0, its only tag.
    push("b", "v1.0.0", "Bolt", "");
    push("a", "v1.0.0", "Arm", &needs("a", "b", ">=v1.0.0"));
    push("c", "v1.0.0", "Cog", &needs("c", "b", ">=v1.0.0"));
    let (a, c) = (format!("{unique}-a"), format!("{unique}-c"));
    apply(&provider_yaml(&a, &format!("{}:v1.0.0", repo("a")), ""));
    apply(&provider_yaml(&c, &format!("{}:v1.0.0", repo("c")), ""));
    wait_provider_healthy(&a, Duration::from_secs(90));
    wait_provider_healthy(&c, Duration::from_secs(90));
    let b = installing(&repo("b")).expect("B installed as a dependency");
    let b_name = b["metadata"]["name"].as_str().unwrap().to_owned();
    assert_eq!(b["spec"]["package"], format!("{}:v1.0.0", repo("b")));
    wait_provider_healthy(&b_name, Duration::from_secs(60));

    // A v2.0.0 needs B >= v2.0.0, which now exists.
    push("b", "v2.0.0", "Bolt", "");
    push("a", "v2.0.0", "Arm", &needs("a", "b", ">=v2.0.0"));
    let kind = format!("bolts.{}", groups["b"]);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let poller = {
        let (stop, reads, failures, kind) =
            (stop.clone(), reads.clone(), failures.clone(), kind.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let (ok, out) = kubectl_try(&["get", &kind, "-A", "-o", "name"]);
                reads.fetch_add(1, Ordering::SeqCst);
                if !ok {
                    failures.lock().unwrap().push(out.trim().to_owned());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let read_more = |n: usize, what: &str| {
        let from = reads.load(Ordering::SeqCst);
        wait_blocking(
            Duration::from_secs(30),
            what,
            || reads.load(Ordering::SeqCst) >= from + n,
            String::new,
        );
    };
    read_more(3, "reads of B's kind before the upgrade");
    apply(&provider_yaml(&a, &format!("{}:v2.0.0", repo("a")), ""));
    wait_blocking(
        Duration::from_secs(120),
        "B moved to v2.0.0 and Healthy on it, A Healthy on v2.0.0",
        || {
            let b = provider_healthy(&b_name)?;
            let a = provider_healthy(&a)?;
            (b["spec"]["package"] == format!("{}:v2.0.0", repo("b")).as_str()
                && b["status"]["currentIdentifier"] == b["spec"]["package"]
                && a["status"]["currentIdentifier"] == format!("{}:v2.0.0", repo("a")).as_str())
            .then_some(())
        },
        explain_packages,
    );
    // B's old revision hands over before it goes.
    wait_blocking(
        Duration::from_secs(60),
        "B's v1.0.0 revision Inactive",
        || {
            revisions_of(&b_name)
                .iter()
                .filter(|r| r["spec"]["desiredState"] == "Active")
                .count()
                == 1
        },
        explain_packages,
    );
    read_more(5, "reads of B's kind after the move");
    stop.store(true, Ordering::SeqCst);
    poller.join().unwrap();
    let failures = failures.lock().unwrap().clone();
    let total = reads.load(Ordering::SeqCst);
    assert!(
        failures.is_empty(),
        "reads of B's kind failed while it moved ({} of {total}): {failures:#?}",
        failures.len()
    );
    eprintln!(
        "dependency move: {total} reads of B's kind, {} failed",
        failures.len()
    );
    assert!(provider_healthy(&c).is_some(), "C accepts B v2.0.0");
    // The move is named on both Providers.
    let events = |name: &str, reason: &str| {
        kubectl(&[
            "get",
            "events",
            "-A",
            "--field-selector",
            &format!("involvedObject.name={name},reason={reason}"),
            "-o",
            "jsonpath={.items[*].message}",
        ])
    };
    let on_b = events(&b_name, "MovedAsDependency");
    assert!(on_b.contains("v2.0.0") && on_b.contains(&c), "{on_b}");
    let on_a = events(&a, "MoveDependency");
    assert!(on_a.contains(&b_name) && on_a.contains("v2.0.0"), "{on_a}");

    // Pinned: PC needs PB < v2.0.0; PA v2.0.0 needs PB >= v2.0.0.
    push("pb", "v1.0.0", "Pin", "");
    push("pa", "v1.0.0", "Peg", &needs("pa", "pb", ">=v1.0.0"));
    push("pc", "v1.0.0", "Pod", &needs("pc", "pb", "<v2.0.0"));
    let (pa, pc) = (format!("{unique}-pa"), format!("{unique}-pc"));
    apply(&provider_yaml(&pa, &format!("{}:v1.0.0", repo("pa")), ""));
    apply(&provider_yaml(&pc, &format!("{}:v1.0.0", repo("pc")), ""));
    wait_provider_healthy(&pa, Duration::from_secs(90));
    wait_provider_healthy(&pc, Duration::from_secs(90));
    push("pb", "v2.0.0", "Pin", "");
    push("pa", "v2.0.0", "Peg", &needs("pa", "pb", ">=v2.0.0"));
    apply(&provider_yaml(&pa, &format!("{}:v2.0.0", repo("pa")), ""));
    let why = wait_blocking(
        Duration::from_secs(60),
        "PA's new revision naming both constraints",
        || {
            let newest = revisions_of(&pa)
                .into_iter()
                .max_by_key(|r| r["spec"]["revision"].as_i64())?;
            let (status, message) = condition(&newest, "Healthy")?;
            (status == "False" && message.contains("satisfies every dependent")).then_some(message)
        },
        explain_packages,
    );
    assert!(
        why.contains(">=v2.0.0")
            && why.contains("<v2.0.0")
            && why.contains(&pc)
            && why.contains(&pa),
        "{why}"
    );
    let pb = installing(&repo("pb")).unwrap();
    assert_eq!(
        pb["spec"]["package"],
        format!("{}:v1.0.0", repo("pb")),
        "nothing moved"
    );
    // PA's first revision keeps serving (make-before-break).
    let first = revisions_of(&pa)
        .into_iter()
        .find(|r| r["spec"]["package"] == format!("{}:v1.0.0", repo("pa")).as_str())
        .unwrap();
    assert_eq!(first["spec"]["desiredState"], "Active", "{first:#}");

    for p in [&a, &c, &pa, &pc] {
        delete_provider(p);
    }
    for p in [&a, &c, &pa, &pc] {
        wait_provider_gone(p);
    }
}
