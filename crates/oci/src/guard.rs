//! A panic is an error, not a crashed process: reading a package runs
//! code (here and in libraries) that a registry's answer or a package's
//! content can set off, so that work runs guarded and a panic in it
//! becomes [`Error::Crashed`] naming the reference and its registry.

use crate::{Error, reference::registry_of, text::text};

/// Runs `work` (unpacking, parsing) on tokio's blocking pool, off the async
/// workers, so a package being read never holds up the others (the leader
/// lease keeps being renewed). A panic in it becomes [`Error::Crashed`]
/// naming the registry, not a crashed process.
pub(crate) async fn off_workers<T: Send + 'static>(
    reference: &str,
    step: &'static str,
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) => Err(crashed(
            reference,
            step,
            if e.is_panic() {
                panic_message(e.into_panic())
            } else {
                "cancelled".to_owned()
            },
        )),
    }
}

/// Runs `work` (a future), turning a panic in it into [`Error::Crashed`]
/// naming the registry.
pub(crate) async fn unwinding<T>(
    reference: &str,
    step: &'static str,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    use futures::FutureExt as _;
    match std::panic::AssertUnwindSafe(work).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => Err(crashed(reference, step, panic_message(panic))),
    }
}

fn crashed(reference: &str, step: &'static str, message: String) -> Error {
    Error::Crashed {
        reference: text(reference),
        registry: registry_of(reference),
        step,
        message: text(&message),
    }
}

/// What a panic said, when it said it as text.
fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    match panic.downcast::<String>() {
        Ok(s) => *s,
        Err(panic) => panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .unwrap_or_else(|| "no message".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[tokio::test]
    async fn a_panic_off_the_workers_is_an_error_naming_the_registry() {
        let e = off_workers("reg.example:5000/x:v1", "unpacking a layer", || {
            if true {
                panic!("boom\u{1}");
            }
            Ok(())
        })
        .await
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to read reg.example:5000/x:v1 from its registry reg.example:5000: unpacking \
             a layer panicked (boom); this is a bug, and trying again will not help"
        );
        assert!(!e.is_transient());
    }
}
