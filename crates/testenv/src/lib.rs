//! numaplane-testenv: a real Kubernetes control plane on loopback for tests and the demo
//! (etcd, kube-apiserver, kube-controller-manager), a Numaflow simulator that plays the Numaflow
//! controller, and an Argo Rollouts analysis stand-in.

pub mod analysis;
pub mod binaries;
pub mod certs;
pub mod controlplane;
pub mod crds;
pub mod simulator;

// Re-exports are added by the modules' owners once they exist:
// pub use simulator::Simulator; pub use analysis::AnalysisStandIn;
pub use analysis::AnalysisStandIn;
pub use controlplane::{TestEnv, TestEnvOptions};
pub use simulator::Simulator;
