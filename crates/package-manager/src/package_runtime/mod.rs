//! Package runtimes, as upstream's `internal/controller/pkg/runtime`: what
//! runs a package's controller, the same for a Provider revision's runtime
//! and a stack Extension's controller. [`render`] makes a revision's
//! ServiceAccount, Service and Deployment from its runtime config, and
//! [`stack`] an Extension's (whose fields [`stack_fields`] allows by list); [`apply`] applies them only when they changed
//! and stops them; [`health`] reads whether one runs and why not;
//! [`handover`] moves the API server's webhook calls from one revision's
//! runtime to the next.

pub mod apply;
pub mod handover;
pub mod health;
pub mod render;
pub mod stack;
pub mod stack_fields;
