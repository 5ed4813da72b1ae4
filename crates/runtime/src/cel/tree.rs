//! The parsed query, checked and rewritten without recursion: its size and
//! depth, comprehensions that nest, and the calls that charge the budgets of
//! an evaluation (see the parent module).

use ::cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, MapExpr, StructExpr, operators};

/// Most nodes of the parsed query.
pub const MAX_NODES: usize = 2000;
/// Deepest parsed query.
pub const MAX_LEVELS: usize = 500;

/// Functions the rewritten query calls. Their names cannot be written in
/// CEL, so a query cannot call them itself.
pub(super) const RANGE_FN: &str = "@range";
pub(super) const WEIGH_FN: &str = "@weigh";

pub(super) const NESTED: &str = "the expression nests a comprehension (all, exists, exists_one, map, filter) inside another; at most one level";

/// The children of a node, each with whether it runs once per loop step.
fn children(expr: &IdedExpr) -> Vec<(&IdedExpr, bool)> {
    match &expr.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => vec![],
        Expr::Call(call) => call
            .target
            .as_deref()
            .into_iter()
            .chain(&call.args)
            .map(|e| (e, false))
            .collect(),
        Expr::Comprehension(c) => vec![
            (&c.iter_range, false),
            (&c.accu_init, false),
            (&c.loop_cond, true),
            (&c.loop_step, true),
            (&c.result, false),
        ],
        Expr::List(list) => list.elements.iter().map(|e| (e, false)).collect(),
        Expr::Map(map) => map.entries.iter().flat_map(|e| entry(&e.expr)).collect(),
        Expr::Struct(s) => s.entries.iter().flat_map(|e| entry(&e.expr)).collect(),
        Expr::Select(select) => vec![(&*select.operand, false)],
    }
}

fn entry(entry: &EntryExpr) -> Vec<(&IdedExpr, bool)> {
    match entry {
        EntryExpr::MapEntry(e) => vec![(&e.key, false), (&e.value, false)],
        EntryExpr::StructField(f) => vec![(&f.value, false)],
    }
}

/// The checks of the parsed query, without recursion; its largest node id.
pub(super) fn check(root: &IdedExpr) -> Result<u64, String> {
    let mut stack = vec![(root, 1, false)];
    let (mut nodes, mut last_id) = (0, 0);
    while let Some((node, level, in_loop)) = stack.pop() {
        nodes += 1;
        if nodes > MAX_NODES {
            return Err(format!(
                "the expression has more than {MAX_NODES} parts; simplify it"
            ));
        }
        if level > MAX_LEVELS {
            return Err(format!(
                "the expression nests more than {MAX_LEVELS} levels deep; simplify it"
            ));
        }
        match &node.expr {
            Expr::Unspecified => return Err("the expression does not parse".to_owned()),
            Expr::Comprehension(_) if in_loop => return Err(NESTED.to_owned()),
            _ => {}
        }
        last_id = last_id.max(node.id);
        for (child, per_step) in children(node) {
            stack.push((child, level + 1, in_loop || per_step));
        }
    }
    Ok(last_id)
}

/// How [`instrument`] treats a node.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    Plain,
    /// Passed through WEIGH_FN: a value built, or a per-step condition.
    Weigh,
    /// A comprehension's loop step (or the branch of it that appends): its
    /// shape is left as the interpreter's fast paths expect it.
    Step,
    /// The argument of a WEIGH_FN just added.
    Weighed,
}

/// Rewrites the query for the budgets (see the module doc). Only run on a
/// tree [`check`] accepted, whose ids go up to `last_id`.
pub(super) fn instrument(root: &mut IdedExpr, last_id: u64) {
    let mut next_id = last_id;
    let mut wrap = |node: &mut IdedExpr, function: &str| {
        next_id += 1;
        let inner = std::mem::take(node);
        *node = IdedExpr {
            id: next_id,
            expr: Expr::Call(CallExpr {
                func_name: function.to_owned(),
                target: None,
                args: vec![inner],
            }),
        };
    };
    let mut stack = vec![(root, Role::Plain)];
    while let Some((node, role)) = stack.pop() {
        let builds = matches!(&node.expr, Expr::Call(c) if c.func_name == operators::ADD);
        if role == Role::Weigh || (builds && role == Role::Plain) {
            wrap(node, WEIGH_FN);
            if let Expr::Call(call) = &mut node.expr {
                stack.extend(call.args.iter_mut().map(|a| (a, Role::Weighed)));
            }
            continue;
        }
        match &mut node.expr {
            Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
            Expr::Call(call) => {
                let conditional = role == Role::Step && call.func_name == operators::CONDITIONAL;
                stack.extend(call.target.as_deref_mut().map(|t| (t, Role::Plain)));
                for (i, arg) in call.args.iter_mut().enumerate() {
                    let role = match i {
                        // The guard of `filter`, `exists_one` and three-argument
                        // `map`: weighed so that every step checks the deadline.
                        0 if conditional => Role::Weigh,
                        1 if conditional => Role::Step,
                        _ => Role::Plain,
                    };
                    stack.push((arg, role));
                }
            }
            Expr::Comprehension(c) => {
                wrap(&mut c.iter_range, RANGE_FN);
                // `all` and `exists` test a condition on every step; the
                // others' is the constant `true`, and their step is weighed.
                let cond = match c.loop_cond.expr {
                    Expr::Literal(_) => Role::Plain,
                    _ => Role::Weigh,
                };
                stack.extend([
                    (&mut c.iter_range, Role::Plain),
                    (&mut c.accu_init, Role::Plain),
                    (&mut c.loop_cond, cond),
                    (&mut c.loop_step, Role::Step),
                    (&mut c.result, Role::Plain),
                ]);
            }
            Expr::List(list) => stack.extend(list.elements.iter_mut().map(|e| (e, Role::Weigh))),
            Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => {
                for e in entries {
                    match &mut e.expr {
                        EntryExpr::MapEntry(e) => {
                            stack.push((&mut e.key, Role::Plain));
                            stack.push((&mut e.value, Role::Weigh));
                        }
                        EntryExpr::StructField(f) => stack.push((&mut f.value, Role::Weigh)),
                    }
                }
            }
            Expr::Select(select) => stack.push((&mut *select.operand, Role::Plain)),
        }
    }
}
