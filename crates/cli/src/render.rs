//! Printing a tree: a table with box-drawing prefixes (NAME, READY, STATE,
//! STATUS, as `crossplane beta trace` prints), `wide` with the namespace,
//! details and whole messages, or JSON.

use crate::node::Node;

/// How to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// The tree, messages cut to fit.
    Tree,
    /// The tree with namespaces, details and whole messages.
    Wide,
    /// The tree as JSON.
    Json,
}

/// How much of a message the narrow tree shows.
const MESSAGE_WIDTH: usize = 72;

/// `root` printed as `output` says.
pub fn render(root: &Node, output: Output) -> String {
    match output {
        Output::Json => {
            let mut s = serde_json::to_string_pretty(&root.to_json()).unwrap_or_default();
            s.push('\n');
            s
        }
        Output::Tree | Output::Wide => table(root, output == Output::Wide),
    }
}

/// One printed row: its cells, in order.
type Row = Vec<String>;

fn table(root: &Node, wide: bool) -> String {
    let mut header: Row = vec!["NAME".into()];
    if wide {
        header.push("NAMESPACE".into());
    }
    header.extend(["READY".into(), "STATE".into(), "STATUS".into()]);
    if wide {
        header.push("DETAILS".into());
    }
    let mut rows = vec![header];
    walk(root, "", "", wide, &mut rows);
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let width = widths.get(i).copied().unwrap_or(0);
                let pad = width.saturating_sub(cell.chars().count()) + 3;
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Adds `n` (after `prefix`, the branch drawn for it) and its children
/// (whose branches continue `indent`).
fn walk(n: &Node, prefix: &str, indent: &str, wide: bool, rows: &mut Vec<Row>) {
    let dash = "-".to_owned();
    let mut row: Row = vec![format!("{prefix}{}", n.title())];
    if wide {
        row.push(n.namespace.clone().unwrap_or_else(|| dash.clone()));
    }
    row.push(n.ready.clone().unwrap_or_else(|| dash.clone()));
    row.push(n.state.clone().unwrap_or_else(|| dash.clone()));
    let message = n.message.clone().unwrap_or_default();
    row.push(if wide {
        message
    } else {
        cut(&message, MESSAGE_WIDTH)
    });
    if wide {
        let details: Vec<String> = n.details.iter().map(|(k, v)| format!("{k}={v}")).collect();
        row.push(details.join(" "));
    }
    // What a package, a registry or a user wrote reaches the terminal as
    // the characters it is, never as an escape sequence.
    rows.push(
        row.into_iter()
            .map(|c| types::printable(&c).into_owned())
            .collect(),
    );
    let last = n.children.len().saturating_sub(1);
    for (i, child) in n.children.iter().enumerate() {
        let (branch, more) = if i == last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        walk(
            child,
            &format!("{indent}{branch}"),
            &format!("{indent}{more}"),
            wide,
            rows,
        );
    }
}

/// `s` on one line, at most `max` characters (an ellipsis says it was cut).
fn cut(s: &str, max: usize) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut out: String = one_line.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> Node {
        let mut root = Node::unread("pkg.crossplane.io/v1", "Provider", "p", None);
        root.ready = Some("False".into());
        root.state = Some("Installed=True".into());
        let mut rev = Node::unread("pkg.crossplane.io/v1", "ProviderRevision", "p-1", None);
        rev.state = Some("Active".into());
        let mut dep = Node::unread("apps/v1", "Deployment", "p-1", Some("crossplane-system"));
        dep.children.push(
            Node::unread("v1", "Pod", "p-1-x", Some("crossplane-system")).with(
                "ErrImagePull",
                format!("container package-runtime: {}", "pull failed ".repeat(10)),
            ),
        );
        rev.children.push(dep);
        rev.children.push(Node::unread(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            "r",
            None,
        ));
        root.children.push(rev);
        root.children.push(Node::unread(
            "pkg.crossplane.io/v1",
            "ProviderRevision",
            "p-0",
            None,
        ));
        root
    }

    #[test]
    fn the_tree_draws_branches_and_cuts_long_messages() {
        let out = render(&tree(), Output::Tree);
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[0].starts_with("NAME") && lines[0].contains("READY"),
            "{out}"
        );
        assert!(lines[1].starts_with("Provider/p "), "{out}");
        assert!(lines[2].starts_with("├─ ProviderRevision/p-1"), "{out}");
        assert!(lines[3].starts_with("│  ├─ Deployment/p-1"), "{out}");
        assert!(lines[4].starts_with("│  │  └─ Pod/p-1-x"), "{out}");
        assert!(lines[5].starts_with("│  └─ ClusterRole/r"), "{out}");
        assert!(lines[6].starts_with("└─ ProviderRevision/p-0"), "{out}");
        assert!(
            lines[4].contains("ErrImagePull") && lines[4].ends_with('…'),
            "{out}"
        );
        // Columns line up: READY starts at the same character everywhere.
        let at = |l: &str| l.chars().position(|c| c == 'F' || c == '-' || c == 'R');
        assert!(at(lines[1]).is_some());
    }

    #[test]
    fn wide_adds_namespace_details_and_whole_messages() {
        let out = render(&tree(), Output::Wide);
        assert!(
            out.lines()
                .next()
                .is_some_and(|l| l.contains("NAMESPACE") && l.contains("DETAILS"))
        );
        assert!(out.contains("crossplane-system"));
        assert!(!out.contains('…'));
    }

    #[test]
    fn an_escape_sequence_in_a_message_is_printed_escaped_in_every_output() {
        let root = Node::unread("pkg.crossplane.io/v1", "Provider", "p", None)
            .with("Unhealthy", "verb \u{1b}]0;pwned\u{7} refused");
        for output in [Output::Tree, Output::Wide, Output::Json] {
            let out = render(&root, output);
            assert!(
                !out.contains('\u{1b}') && !out.contains('\u{7}'),
                "{output:?}: {out:?}"
            );
            assert!(out.contains("]0;pwned"), "{output:?}: {out}");
        }
    }

    #[test]
    fn json_is_the_tree() {
        let v: serde_json::Value = serde_json::from_str(&render(&tree(), Output::Json)).unwrap();
        assert_eq!(v["kind"], "Provider");
        assert_eq!(
            v["children"][0]["children"][0]["children"][0]["status"]["state"],
            "ErrImagePull"
        );
    }
}
