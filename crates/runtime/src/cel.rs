//! CEL queries over one Kubernetes object, such as a readiness check
//! `object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')`:
//! the object is the variable `object` (its JSON) and the result must be a bool.
//!
//! A query is user input and the object may be a Secret, so everything a
//! query can make the process do is bounded, and no error names a value of
//! the object:
//!
//! - Before parsing, a single scan (string literals and comments skipped)
//!   rejects a source over 8 KiB, over 1000 tokens, with brackets nested
//!   deeper than 24 or with more than 16 `?`. The parser limits some nesting
//!   but not chains such as `1+1+…` or `a.b.c…`, which it builds into deep
//!   trees: the token limit bounds those.
//! - The parser runs on a thread of its own with a 64 MiB stack; a panic
//!   there is an error. The tree it returns is then walked without
//!   recursion: at most 2000 nodes, 500 levels deep.
//! - A comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) may sit
//!   beside another but not inside another's loop, so each runs at most once
//!   per evaluation. The lists and maps they go over count against a budget
//!   of 100 000 elements per evaluation.
//! - The values a query builds (list and map literals, `+`, the results of
//!   `map`) count against a budget of 1 000 000 cells per evaluation (an
//!   element of a list or map, or 64 bytes of a string, is a cell).
//! - Evaluation runs on one of two long-lived threads of its own (64 MiB
//!   stack, panics caught), so at most two at once, for at most 1 s: every
//!   loop step checks the deadline. A thread per evaluation cost ~140 µs of
//!   spawning alone (bench/cel.json).
//! - Errors say what to fix in the query, in at most 512 characters. A
//!   missing field is named only when the query spells it.
//!
//! Both budgets work by rewriting the parsed query: each comprehension's range
//! is passed through a function that charges its size, and each value built
//! (and each loop step) through one that weighs it and checks the deadline.

use std::{
    collections::HashMap,
    fmt,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Arc, LazyLock, Mutex, PoisonError,
        atomic::{AtomicU8, AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use ::cel::{
    Context, Env, ExecutionError, FunctionContext, IdedExpr, ParseErrors, Value,
    common::{
        types::{
            CelBool, CelBytes, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString,
            CelUInt,
        },
        value::{CowVal, Val},
    },
};
use tokio::sync::{Semaphore, oneshot};

use crate::lru::Lru;

mod scan;
mod tree;
mod workers;

pub use scan::{MAX_BRACKETS, MAX_QUESTION_MARKS, MAX_SOURCE, MAX_TOKENS};
pub use tree::{MAX_LEVELS, MAX_NODES};

/// Most elements all comprehensions of one evaluation go over.
pub const MAX_ITERATIONS: u64 = 100_000;
/// Most cells the values one evaluation builds hold.
pub const MAX_CELLS: u64 = 1_000_000;
/// Longest evaluation.
pub const TIMEOUT: Duration = Duration::from_secs(1);
/// Longest error message, in characters.
pub const MAX_MESSAGE: usize = 512;

/// The parser's own limit on nested expressions: above what the bracket and
/// `?` limits allow, so it only backs them up.
const PARSE_DEPTH: u16 = 48;
const PARSE_RECOVERIES: u32 = 4;
/// Parsing fewer than MAX_TOKENS tokens takes milliseconds.
const PARSE_TIMEOUT: Duration = Duration::from_secs(2);
use workers::{PARALLEL, STACK};
/// How long an evaluation waits for one of the PARALLEL slots.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of a string or bytes value that count as one cell.
const CELL_BYTES: u64 = 64;

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));
static EVALUATIONS: Semaphore = Semaphore::const_new(PARALLEL);

/// What is wrong with a query or its evaluation, said so that a user can fix
/// the query: never a value of the object, at most MAX_MESSAGE characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct QueryError {
    message: String,
    missing: bool,
}

impl QueryError {
    fn new(message: impl Into<String>) -> Self {
        let message = message.into();
        if message.chars().count() <= MAX_MESSAGE {
            return Self {
                message,
                missing: false,
            };
        }
        let mut cut: String = message.chars().take(MAX_MESSAGE - 1).collect();
        cut.push('…');
        Self {
            message: cut,
            missing: false,
        }
    }

    /// Whether the query read a field the object does not have (yet): a
    /// question of the object, not of the query.
    pub fn is_missing_field(&self) -> bool {
        self.missing
    }
}

/// A compiled query: cheap to clone, evaluated any number of times.
#[derive(Clone)]
pub struct Query(Arc<Compiled>);

struct Compiled {
    source: String,
    expr: IdedExpr,
}

impl fmt::Debug for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Query").field(&self.0.source).finish()
    }
}

impl Query {
    /// Checks and parses `source`. Blocks for as long as parsing takes (a
    /// few milliseconds, on a thread of its own); [`Queries`] does it once
    /// per source.
    pub fn compile(source: &str) -> Result<Query, QueryError> {
        scan::scan(source).map_err(QueryError::new)?;
        let (tx, rx) = mpsc::channel();
        let owned = source.to_owned();
        std::thread::Builder::new()
            .name("cel-parse".into())
            .stack_size(STACK)
            .spawn(move || {
                // A tree that fails a check is dropped here, on this stack.
                let parsed =
                    catch_unwind(AssertUnwindSafe(|| parse(&owned))).unwrap_or_else(|_| {
                        Err(QueryError::new("the expression made the CEL parser fail"))
                    });
                let _ = tx.send(parsed.map(|expr| Compiled {
                    source: owned,
                    expr,
                }));
            })
            .map_err(|_| QueryError::new("could not start a thread to parse the expression"))?;
        match rx.recv_timeout(PARSE_TIMEOUT) {
            Ok(compiled) => compiled.map(|c| Query(Arc::new(c))),
            // The thread goes on parsing alone; nothing waits for it.
            Err(mpsc::RecvTimeoutError::Timeout) => Err(QueryError::new(format!(
                "the expression took longer than {}s to parse; simplify it",
                PARSE_TIMEOUT.as_secs()
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(QueryError::new("the expression made the CEL parser fail"))
            }
        }
    }

    /// The query's answer for `object`, within the bounds the module
    /// describes.
    pub async fn evaluate(&self, object: &serde_json::Value) -> Result<bool, QueryError> {
        self.answer(object, as_bool, TIMEOUT).await
    }

    /// The query's answer for `object` as text (a message expression),
    /// within the same bounds, at most [`MAX_MESSAGE`] characters.
    pub async fn evaluate_text(&self, object: &serde_json::Value) -> Result<String, QueryError> {
        self.answer(object, as_text, TIMEOUT).await
    }

    /// The answer within `timeout` (always [`TIMEOUT`] but in tests of the
    /// other bounds, which must not depend on how busy the machine is).
    async fn answer<T: Send + 'static>(
        &self,
        object: &serde_json::Value,
        read: Read<T>,
        timeout: Duration,
    ) -> Result<T, QueryError> {
        let permit = match tokio::time::timeout(QUEUE_TIMEOUT, EVALUATIONS.acquire()).await {
            Ok(Ok(permit)) => permit,
            _ => {
                return Err(QueryError::new(
                    "too many expression evaluations at once; will try again",
                ));
            }
        };
        let (tx, rx) = oneshot::channel();
        let compiled = Arc::clone(&self.0);
        let object = object.clone();
        let deadline = Instant::now() + timeout;
        let job: workers::Job = Box::new(move || {
            // The slot is held until the job ends, not until the caller stops
            // waiting: at most PARALLEL evaluations ever run.
            let _permit = permit;
            let answer = catch_unwind(AssertUnwindSafe(|| run(&compiled, &object, deadline, read)))
                .unwrap_or_else(|_| {
                    Err(QueryError::new(
                        "the expression made the CEL interpreter fail",
                    ))
                });
            let _ = tx.send(answer);
        });
        let sent = workers::submit(job);
        if !sent {
            return Err(QueryError::new(
                "could not start a thread to evaluate the expression",
            ));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(QueryError::new(
                "the expression made the CEL interpreter fail",
            )),
            // The thread may still be running: it stops at its next loop step
            // (past the deadline) or when the operation it is in returns.
            Err(_) => Err(too_slow()),
        }
    }
}

/// Compiled queries by source, so that a query is compiled once, not on
/// every reconcile. Failures are kept too; a source over MAX_SOURCE is never
/// kept.
pub struct Queries {
    cache: Mutex<Lru<String, Result<Query, QueryError>>>,
}

impl Queries {
    /// At most `capacity` sources remembered.
    pub fn new(capacity: usize) -> Self {
        Self {
            cache: Mutex::new(Lru::new(capacity)),
        }
    }

    /// The compiled `source`, compiled now if it is not remembered.
    pub fn get(&self, source: &str) -> Result<Query, QueryError> {
        if source.len() > MAX_SOURCE {
            return Err(QueryError::new(scan::too_long(source.len())));
        }
        let lock = || self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = lock().get(source) {
            return known.clone();
        }
        let compiled = Query::compile(source);
        let gone = lock().insert(source.to_owned(), compiled.clone());
        drop(gone);
        compiled
    }
}

fn too_slow() -> QueryError {
    QueryError::new(format!(
        "the expression took longer than {}s to evaluate; make it do less",
        TIMEOUT.as_secs()
    ))
}

/// Parses, checks and rewrites the query (on the parse thread).
fn parse(source: &str) -> Result<IdedExpr, QueryError> {
    let mut expr = ENV
        .parser()
        .max_recursion_depth(PARSE_DEPTH)
        .error_recovery_limit(PARSE_RECOVERIES)
        .parse(source)
        .map_err(|e| parse_error(&e))?;
    let last_id = tree::check(&expr).map_err(QueryError::new)?;
    tree::instrument(&mut expr, last_id);
    Ok(expr)
}

fn parse_error(errors: &ParseErrors) -> QueryError {
    let Some(first) = errors.errors.first() else {
        return QueryError::new("the expression does not parse");
    };
    let what = match (&first.source, first.msg.as_str()) {
        (Some(source), "UNKNOWN") => source.to_string(),
        _ => first.msg.clone(),
    };
    let (line, column) = first.pos;
    let at = if line > 0 {
        format!(" (line {line}, column {column})")
    } else {
        String::new()
    };
    QueryError::new(format!("the expression does not parse{at}: {what}"))
}

/// What one evaluation may still spend.
struct Budget {
    deadline: Instant,
    iterations: AtomicU64,
    cells: AtomicU64,
    /// Which limit was hit, if any: 0 none, then ITERATIONS, CELLS or LATE.
    exceeded: AtomicU8,
}

const ITERATIONS: u8 = 1;
const CELLS: u8 = 2;
const LATE: u8 = 3;

impl Budget {
    /// Takes `amount` from `left`, or records that `limit` was hit. An error
    /// of the interpreter's may be absorbed (`error || true` is true), so
    /// [`run`] also looks at what was recorded.
    fn spend(&self, left: &AtomicU64, amount: u64, limit: u8) -> Result<(), ExecutionError> {
        if Instant::now() >= self.deadline {
            return Err(self.exceed(LATE));
        }
        let have = left.load(Ordering::Relaxed);
        if amount > have {
            return Err(self.exceed(limit));
        }
        left.store(have - amount, Ordering::Relaxed);
        Ok(())
    }

    fn exceed(&self, limit: u8) -> ExecutionError {
        let _ = self
            .exceeded
            .compare_exchange(0, limit, Ordering::Relaxed, Ordering::Relaxed);
        ExecutionError::function_error("budget", "exceeded")
    }

    /// The limit that was hit, if any, as the evaluation's error.
    fn error(&self) -> Option<QueryError> {
        match self.exceeded.load(Ordering::Relaxed) {
            ITERATIONS => Some(QueryError::new(format!(
                "the expression iterates over more than {MAX_ITERATIONS} elements in all (the lists and maps its all, exists, exists_one, map and filter go over); iterate over fewer"
            ))),
            CELLS => Some(QueryError::new(format!(
                "the expression builds more than {MAX_CELLS} values in all (elements of the lists and maps it makes, and 64-byte pieces of its strings); build less"
            ))),
            LATE => Some(too_slow()),
            _ => None,
        }
    }
}

type Function = Box<
    dyn for<'c, 'v> Fn(&mut FunctionContext<'c, 'v>) -> Result<CowVal<'c, 'v>, ExecutionError>
        + Send
        + Sync,
>;

fn function<F>(f: F) -> Function
where
    F: for<'c, 'v> Fn(&mut FunctionContext<'c, 'v>) -> Result<CowVal<'c, 'v>, ExecutionError>
        + Send
        + Sync
        + 'static,
{
    Box::new(f)
}

/// A function of one argument that returns it unchanged, after `charge`.
fn pass_through<C>(charge: C) -> Function
where
    C: Fn(&dyn Val) -> Result<(), ExecutionError> + Send + Sync + 'static,
{
    function(move |ftx| {
        let count = ftx.args.len();
        match ftx.args.pop() {
            Some(value) if count == 1 => {
                charge(value.as_ref())?;
                Ok(value)
            }
            _ => Err(ExecutionError::invalid_argument_count(1, count)),
        }
    })
}

/// The cells of `value`, counted up to a little over `cap`.
fn weight(value: &dyn Val, cap: u64) -> u64 {
    let mut total = 0;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        total += 1;
        if let Some(s) = v.downcast_ref::<CelString>() {
            total += s.inner().len() as u64 / CELL_BYTES;
        } else if let Some(b) = v.downcast_ref::<CelBytes>() {
            total += b.inner().len() as u64 / CELL_BYTES;
        } else if let Some(list) = v.downcast_ref::<CelList>() {
            stack.extend(list.inner().iter().map(|e| e.as_ref()));
        } else if let Some(map) = v.downcast_ref::<CelMap>() {
            stack.extend(map.inner().values().map(|e| e.as_ref()));
        }
        if total > cap {
            break;
        }
    }
    total
}

/// The object as CEL sees it, borrowing its strings. Integers are `int`
/// where they fit, as in Kubernetes' CEL (serde would make positive ones
/// `uint`). Recursive, on the evaluation thread's stack: objects read
/// through serde_json nest at most 128 levels.
fn to_val(json: &serde_json::Value) -> Box<dyn Val + '_> {
    use serde_json::Value as Json;
    match json {
        Json::Null => Box::new(CelNull),
        Json::Bool(b) => Box::new(CelBool::from(*b)),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            (None, None) => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        Json::String(s) => Box::new(CelString::from(s.as_str())),
        Json::Array(items) => Box::new(CelList::from(items.iter().map(to_val).collect::<Vec<_>>())),
        Json::Object(fields) => Box::new(CelMap::from(
            fields
                .iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), to_val(v)))
                .collect::<HashMap<_, _>>(),
        )),
    }
}

/// One evaluation, on the evaluation thread.
/// Reads an evaluation's value as what the caller wants.
type Read<T> = fn(&CowVal<'_, '_>) -> Result<T, QueryError>;

fn as_bool(value: &CowVal<'_, '_>) -> Result<bool, QueryError> {
    match value.downcast_ref::<CelBool>() {
        Some(b) => Ok(*b.inner()),
        None => Err(not_a_bool(value.get_type().name())),
    }
}

fn as_text(value: &CowVal<'_, '_>) -> Result<String, QueryError> {
    match value.downcast_ref::<CelString>() {
        Some(s) => Ok(crate::events::truncate(s.inner().to_owned(), MAX_MESSAGE)),
        None => Err(QueryError::new(format!(
            "the expression must give a string, not a {}",
            value.get_type().name()
        ))),
    }
}

fn run<T>(
    compiled: &Compiled,
    object: &serde_json::Value,
    deadline: Instant,
    read: Read<T>,
) -> Result<T, QueryError> {
    let budget = Arc::new(Budget {
        deadline,
        iterations: AtomicU64::new(MAX_ITERATIONS),
        cells: AtomicU64::new(MAX_CELLS),
        exceeded: AtomicU8::new(0),
    });
    let mut ctx = Context::with_env(Arc::clone(&ENV));
    ctx.add_variable_as_val("object", to_val(object));
    let b = Arc::clone(&budget);
    let range = pass_through(move |range| {
        let size = range.as_sizer().map_or(0, |s| *s.size().inner());
        b.spend(&b.iterations, u64::try_from(size).unwrap_or(0), ITERATIONS)
    });
    let b = Arc::clone(&budget);
    let weigh = pass_through(move |value| {
        let left = b.cells.load(Ordering::Relaxed);
        b.spend(&b.cells, weight(value, left), CELLS)
    });
    for (name, function) in [(tree::RANGE_FN, range), (tree::WEIGH_FN, weigh)] {
        ctx.add_function::<Function, _>(name, function)
            .map_err(|_| QueryError::new("the expression's budget could not be set up"))?;
    }
    let answer = match Value::resolve_val(&compiled.expr, &ctx) {
        Ok(value) => read(&value),
        Err(e) => Err(describe(&e, &compiled.source)),
    };
    match budget.error() {
        Some(exceeded) => Err(exceeded),
        None => answer,
    }
}

fn not_a_bool(type_name: &str) -> QueryError {
    let article = match type_name.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    };
    QueryError::new(format!(
        "the expression must return a bool, it returned {article} {type_name}"
    ))
}

/// An execution error in words, without the values it carries: only names
/// that the query itself spells, operators and type names.
fn describe(error: &ExecutionError, source: &str) -> QueryError {
    let mut described = describe_text(error, source);
    described.missing = matches!(error, ExecutionError::NoSuchKey(_));
    described
}

fn describe_text(error: &ExecutionError, source: &str) -> QueryError {
    let spelled = |name: &str| !name.is_empty() && source.contains(name);
    QueryError::new(match error {
        ExecutionError::NoSuchKey(key) if spelled(key.as_str()) => format!(
            "the expression reads a field the object does not have: {key} (guard it with has(...))"
        ),
        ExecutionError::NoSuchKey(_) => {
            "the expression reads a field or key the object does not have (guard it with has(...))"
                .to_owned()
        }
        ExecutionError::UndeclaredReference(name) if spelled(name.as_str()) => {
            format!(
                "the expression refers to {name}, which is not defined (the object is `object`)"
            )
        }
        ExecutionError::UndeclaredReference(_) => {
            "the expression refers to something not defined (the object is `object`)".to_owned()
        }
        // Operators are named as the parser calls them: `_<_`, `@in`, `_[_]`.
        ExecutionError::NoSuchOverload(o) => format!(
            "the expression applies {} to ({}), which it does not support",
            o.function().trim_matches(['_', '@']),
            o.argument_types().join(", ")
        ),
        ExecutionError::InvalidArgumentCount { expected, actual } => {
            format!("the expression calls a function with {actual} arguments instead of {expected}")
        }
        ExecutionError::UnexpectedType { want, .. } => {
            format!("the expression uses a value of the wrong type where {want} is expected")
        }
        ExecutionError::NotSupportedAsMethod { method, .. } if spelled(method) => {
            format!("the expression calls {method} on a value that does not have it")
        }
        ExecutionError::FunctionError { function, .. } if spelled(function) => {
            format!("the expression's call of {function} failed on the value it was given")
        }
        ExecutionError::DivisionByZero(_) | ExecutionError::RemainderByZero(_) => {
            "the expression divides by zero".to_owned()
        }
        ExecutionError::Overflow(op, ..) => format!("the expression overflows in {op}"),
        ExecutionError::IndexOutOfBounds(_) => {
            "the expression reads past the end of a list".to_owned()
        }
        ExecutionError::DuplicateKey(_) => {
            "the expression builds a map with a repeated key".to_owned()
        }
        ExecutionError::UnsupportedKeyType(_) => {
            "the expression uses a value as a map key that cannot be one".to_owned()
        }
        ExecutionError::ValuesNotComparable(..) => {
            "the expression compares values that cannot be compared".to_owned()
        }
        ExecutionError::UnsupportedBinaryOperator(op, ..) => {
            format!("the expression applies {op} to values that do not support it")
        }
        ExecutionError::UnsupportedIndex(..) => {
            "the expression indexes a value with something that cannot index it".to_owned()
        }
        ExecutionError::MissingArgumentOrTarget => {
            "the expression calls a function without its argument".to_owned()
        }
        _ => "the expression failed while it was evaluated".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    const READY: &str =
        "object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')";

    fn with_ready(status: &str) -> serde_json::Value {
        json!({"status": {"conditions": [
            {"type": "Synced", "status": "True"},
            {"type": "Ready", "status": status},
        ]}})
    }

    async fn eval(source: &str, object: &serde_json::Value) -> Result<bool, QueryError> {
        Query::compile(source)?.evaluate(object).await
    }

    /// Like [`eval`], with a deadline no busy machine reaches: for the
    /// bounds other than time, whose message must be theirs.
    async fn eval_unhurried(source: &str, object: &serde_json::Value) -> Result<bool, QueryError> {
        Query::compile(source)?
            .answer(object, as_bool, Duration::from_secs(60))
            .await
    }

    fn message(result: Result<impl fmt::Debug, QueryError>) -> String {
        result.expect_err("an error").to_string()
    }

    #[tokio::test]
    async fn a_ready_condition_is_found_or_not() {
        assert_eq!(eval(READY, &with_ready("True")).await, Ok(true));
        assert_eq!(eval(READY, &with_ready("False")).await, Ok(false));
    }

    #[tokio::test]
    async fn has_tells_a_missing_field() {
        assert_eq!(
            eval("has(object.status)", &json!({"spec": {}})).await,
            Ok(false)
        );
        assert_eq!(
            eval("has(object.spec)", &json!({"spec": {}})).await,
            Ok(true)
        );
    }

    #[tokio::test]
    async fn reading_a_missing_field_names_it() {
        let err = message(eval("object.status.ready == true", &json!({"spec": {}})).await);
        assert!(err.contains("does not have: status"), "{err}");
        assert!(err.contains("has(...)"), "{err}");
    }

    #[tokio::test]
    async fn the_result_must_be_a_bool() {
        let err = message(eval("size(object.spec)", &json!({"spec": {"a": 1}})).await);
        assert_eq!(err, "the expression must return a bool, it returned an int");
        let err = message(eval("'x'", &json!({})).await);
        assert_eq!(
            err,
            "the expression must return a bool, it returned a string"
        );
    }

    #[test]
    fn huge_sources_are_refused_at_once() {
        let started = Instant::now();
        for source in [
            "a".repeat(1 << 20),
            "(".repeat(100_000),
            format!("1{}", "+1".repeat(49_999)),
            format!("a{}", ".b".repeat(20_000)),
        ] {
            let err = message(Query::compile(&source));
            assert!(err.contains("at most 8192"), "{err}");
        }
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn the_scan_bounds_what_the_parser_does_not() {
        let deep = format!("{}1{} == 1", "(".repeat(4000), ")".repeat(4000));
        assert!(message(Query::compile(&deep)).contains("brackets deeper than 24"));
        let deep = format!("{}1{} == 1", "[".repeat(25), "]".repeat(25));
        assert!(message(Query::compile(&deep)).contains("brackets deeper than 24"));
        let chain = format!("1{} == 1", "+1".repeat(4000));
        assert!(message(Query::compile(&chain)).contains("more than 1000 tokens"));
        let chain = format!("object{} == 1", ".b".repeat(3000));
        assert!(message(Query::compile(&chain)).contains("more than 1000 tokens"));
        let ternaries = format!("{}true{}", "true ? ".repeat(17), " : false".repeat(17));
        assert!(message(Query::compile(&ternaries)).contains("more than 16 `?`"));
        // Within the limits: parsed and evaluated.
        let deep = format!("{}1{} == 1", "(".repeat(20), ")".repeat(20));
        Query::compile(&deep).unwrap();
    }

    #[test]
    fn the_scan_skips_literals_and_comments() {
        for source in [
            "'((((((((((((((((((((((((((((((' != ''",
            "\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"\" != ''",
            "r'\\((((((((((((((((((((((((((((((' != ''",
            "b\"{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{\" != b''",
            "'''((((((((((((((((((((((((((((((\n''' != ''",
            "true // it's (((((((((((((((((((((((((((((",
        ] {
            Query::compile(source).expect(source);
        }
        let comment = format!("true // {}", "?".repeat(40));
        Query::compile(&comment).unwrap();
    }

    #[tokio::test]
    async fn long_chains_within_the_limits_evaluate() {
        let sum = format!("1{} == 450", "+1".repeat(449));
        assert_eq!(eval(&sum, &json!({})).await, Ok(true));
        let nots = format!("{}true", "!".repeat(990));
        assert_eq!(eval(&nots, &json!({})).await, Ok(true));
    }

    #[test]
    fn comprehensions_may_not_nest() {
        let nested = "object.a.exists(x, object.b.exists(y, x == y))";
        assert_eq!(message(Query::compile(nested)), tree::NESTED);
        let nested = "object.a.all(x, object.b.map(y, y).size() > 0)";
        assert_eq!(message(Query::compile(nested)), tree::NESTED);
        Query::compile("object.a.exists(x, x == 1) && object.b.all(y, y > 0)").unwrap();
        Query::compile("object.a.filter(x, x > 1).exists(y, y == 2)").unwrap();
    }

    #[tokio::test]
    async fn comprehensions_give_the_same_answers() {
        let object = json!({"a": [1, 2, 3], "m": {"k": 1}});
        for (source, want) in [
            ("object.a.all(x, x > 0)", true),
            ("object.a.exists_one(x, x > 2)", true),
            ("object.a.map(x, x * 2) == [2, 4, 6]", true),
            ("object.a.map(x, x > 1, x) == [2, 3]", true),
            ("object.a.filter(x, x > 1) == [2, 3]", true),
            ("object.m.exists(k, k == 'k')", true),
            ("object.a + [4] == [1, 2, 3, 4]", true),
            // JSON integers are ints, as in Kubernetes' CEL.
            ("object.a[0] * 2 == 2 && type(object.a[0]) == int", true),
            ("{'a': object.a}.a[2] == 3", true),
        ] {
            assert_eq!(eval(source, &object).await, Ok(want), "{source}");
        }
    }

    #[tokio::test]
    async fn big_ranges_run_out_of_budget() {
        let items: Vec<i64> = (0..300_000).collect();
        let object = json!({ "items": items });
        // Stopped by the element budget (its message), not by the clock.
        let err = message(
            eval_unhurried(
                "object.items.exists(x, string(x).size() > 10 && x % 7 == 3)",
                &object,
            )
            .await,
        );
        assert!(err.contains("more than 100000 elements"), "{err}");

        let items: Vec<i64> = (0..60_000).collect();
        let object = json!({ "items": items });
        let both = "object.items.all(x, x >= 0) && object.items.all(x, x >= 0)";
        assert!(message(eval_unhurried(both, &object).await).contains("more than 100000"));
        // An error that `||` would absorb still fails the evaluation.
        let absorbed = "object.items.all(x, x >= 0) && object.items.all(x, x >= 0) || true";
        assert!(message(eval_unhurried(absorbed, &object).await).contains("more than 100000"));
        assert_eq!(
            eval_unhurried("object.items.all(x, x >= 0)", &object).await,
            Ok(true)
        );
    }

    #[tokio::test]
    async fn slow_loop_steps_stop_at_the_deadline() {
        let items: Vec<i64> = (0..50_000).collect();
        let object = json!({ "items": items });
        let started = Instant::now();
        let err = message(eval("object.items.all(x, object.items == object.items)", &object).await);
        assert!(err.contains("longer than 1s"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn values_built_are_weighed() {
        let items: Vec<i64> = (0..6_000).collect();
        let object = json!({ "items": items });
        let err =
            message(eval_unhurried("object.items.map(x, object.items).size() > 0", &object).await);
        assert!(err.contains("more than 1000000 values"), "{err}");
        let copies = format!("[{}].size() > 0", vec!["object.items"; 200].join(", "));
        assert!(message(eval_unhurried(&copies, &object).await).contains("more than 1000000"));
    }

    #[tokio::test]
    async fn errors_never_show_a_value_of_the_object() {
        let object = json!({"data": {"password": "s3cr3t-value", "n": 0}});
        for source in [
            "object.data.password < 1",
            "object.data[object.data.password] == 1",
            "int(object.data.password) > 0",
            "object.data.password.matches('[')",
            "object.data.password.matches(object.data.password + '(')",
            "duration(object.data.password) > duration('1s')",
            "timestamp(object.data.password) > timestamp('2020-01-01T00:00:00Z')",
            "object.data.password / 2 == 1",
            "1 / object.data.n == 1",
            "[object.data.password][5] == 1",
            "{object.data.password: 1, object.data.password: 2}.size() == 1",
            "object.data.password",
            "object.data.password.all(x, true)",
            "object.data.password in object.data.password",
        ] {
            let err = message(eval(source, &object).await);
            assert!(!err.contains("s3cr3t"), "{source}: {err}");
            assert!(err.len() <= MAX_MESSAGE * 4, "{source}: {err}");
        }
        let err = message(eval("object.data.password < 1", &object).await);
        assert_eq!(
            err,
            "the expression applies < to (string, int), which it does not support"
        );
    }

    #[tokio::test]
    async fn a_query_is_compiled_once_and_evaluated_often() {
        let query = Query::compile(READY).unwrap();
        let object = with_ready("True");
        assert_eq!(query.evaluate(&object).await, Ok(true));
        assert_eq!(query.clone().evaluate(&object).await, Ok(true));

        let queries = Queries::new(4);
        let a = queries.get(READY).unwrap();
        let b = queries.get(READY).unwrap();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(
            queries.get("1 +").unwrap_err(),
            queries.get("1 +").unwrap_err()
        );
    }

    #[test]
    fn parse_errors_say_where() {
        let err = message(Query::compile("object.status ==="));
        assert!(err.starts_with("the expression does not parse"), "{err}");
        let err = message(Query::compile("object.status == nope("));
        assert!(err.starts_with("the expression does not parse"), "{err}");
        let long = QueryError::new("x".repeat(2000));
        assert_eq!(long.to_string().chars().count(), MAX_MESSAGE);
    }

    #[tokio::test]
    async fn undefined_names_are_named() {
        let err = message(eval("objekt.status == 1", &json!({})).await);
        assert!(err.contains("refers to objekt"), "{err}");
        let err = message(eval("nope(object)", &json!({})).await);
        assert!(err.contains("refers to nope"), "{err}");
    }
}
