//! numaplane-testenv: a real Kubernetes control plane on loopback for tests and the demo
//! (etcd, kube-apiserver, kube-controller-manager); the real stack around it ([`realstack`]:
//! kube-scheduler, KWOK pods, the real Numaflow controller, Argo Rollouts and Prometheus, with
//! stand-ins only for the pipeline daemon and the vertex metrics); an opt-in real node
//! ([`realnode`]: kubelet and containerd running real containers); and the benchmark's load
//! partner, a Numaflow simulator light enough to play the Numaflow controller for a thousand
//! pipelines on two cores ([`simulator`]).

pub mod binaries;
pub mod certs;
pub mod controlplane;
pub mod crds;
pub mod faults;
pub mod netns;
pub mod realnode;
pub mod realstack;
pub mod simulator;

pub use controlplane::{TestEnv, TestEnvOptions};
pub use simulator::Simulator;
