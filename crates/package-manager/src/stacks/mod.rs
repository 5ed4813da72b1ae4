//! Stacks (seed 001): ExtensionRequests install stack packages (by package
//! or by a CRD they own, found by searching the registry), dependencies
//! first; Extensions, however made, get their controller Deployment and
//! their CRDs labelled with who owns and who depends on them, so a CRD goes
//! only when no installed stack has a use for it.
//!
//! Rooms: [`plan`] orders an install and writes the Extension record,
//! [`ownership`] decides who owns a CRD (pure, for both controllers),
//! [`index`] searches registries, [`requests`] and [`extensions`] are the
//! two controllers, [`status`] their Ready condition, [`error`] their
//! errors.

pub mod error;
pub mod extensions;
pub mod index;
pub mod known;
pub mod ownership;
pub mod plan;
pub mod requests;
pub mod status;

pub use error::Error;
