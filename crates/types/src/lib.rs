//! The API of crossplane-rs: every CRD type, one module per group/version,
//! and the Kubernetes API types the binaries use, re-exported so that there is
//! one seam to Kubernetes types.

pub mod common;

/// `workload.crossplane.io`
pub mod workload {
    pub mod v1alpha1;
}

/// `compute.crossplane.io`
pub mod compute {
    pub mod v1alpha1;
}

/// `kubernetes.crossplane.io`
pub mod kubernetes {
    pub mod v1alpha1;
}

/// `extensions.crossplane.io`
pub mod extensions {
    pub mod v1alpha1;
}

/// `pkg.crossplane.io`
pub mod pkg {
    mod runtime_config;
    pub mod v1;
    pub mod v1alpha1;
    pub use runtime_config::v1beta1;
}

pub mod crds;

pub use k8s_openapi;
pub use kube;
