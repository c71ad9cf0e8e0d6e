//! The real node runs real containers: a pod selecting and tolerating it runs a static busybox
//! imported from an OCI archive, completes, and its log comes back through the API server from
//! kubelet; its address is on the node's CNI bridge. KWOK's node is left alone, and after
//! shutdown nothing of the node stays mounted.
//! Needs `make testenv-binaries` (control plane and `hack/realnode-binaries.sh`); fails without.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, LogParams, PostParams};
use numaplane_testenv::binaries::RealNodeBinaries;
use numaplane_testenv::realnode::{self, NODE_NAME, TAINT_KEY};
use numaplane_testenv::{TestEnv, TestEnvOptions};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_runs_on_the_real_node() {
    let t0 = Instant::now();
    let bins = RealNodeBinaries::locate().expect("real-node parts");
    let env = TestEnv::start_with(TestEnvOptions {
        real_node: true,
        ..TestEnvOptions::default()
    })
    .await
    .expect("environment with a real node");
    eprintln!("environment with a real node up in {:?}", t0.elapsed());
    let node = env.real_node().expect("real node");
    env.import_image(&bins.busybox_archive)
        .expect("importing busybox");

    // Registered by kubelet, labelled and tainted as promised.
    let n = Api::<Node>::all(env.client())
        .get(NODE_NAME)
        .await
        .expect("node");
    assert_eq!(
        n.metadata.labels.as_ref().and_then(|l| l.get("type")),
        Some(&"real".to_string())
    );
    assert!(
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts
                .iter()
                .any(|t| t.key == TAINT_KEY && t.effect == "NoSchedule")),
        "{:?}",
        n.spec
    );

    let ns = env.create_namespace("real-node").await;
    let pods: Api<Pod> = Api::namespaced(env.client(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "hello"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"type": "real"},
            "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{
                "name": "main",
                "image": bins.busybox_image,
                "imagePullPolicy": "Never",
                // Only a real container has its own files and its own network interface.
                "command": ["/bin/sh", "-c",
                    "echo written > /tmp/f && echo \"hello from $(cat /tmp/f) $(ip -4 -o addr show eth0 | wc -l)\""]
            }]
        }
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");

    let deadline = Instant::now() + WAIT;
    let done = loop {
        let p = pods.get("hello").await.expect("get pod");
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "pod not finished within {WAIT:?}: {:?}\nkubelet log: {}",
            p.status,
            numaplane_testenv::controlplane::tail(&node.dir().join("node.log"), 30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase.as_deref(),
        Some("Succeeded"),
        "{status:?}\nkubelet log: {}",
        numaplane_testenv::controlplane::tail(&node.dir().join("node.log"), 30)
    );
    assert_eq!(
        done.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(NODE_NAME)
    );

    // The log travels API server -> kubelet (on the node's address) -> containerd's log file,
    // which containerd may still be writing when kubelet reports the pod finished (seen on a
    // loaded machine): read until it has a line or the deadline passes.
    let log = loop {
        let log = pods
            .logs("hello", &LogParams::default())
            .await
            .expect("pod log through the API server");
        if !log.trim().is_empty() || Instant::now() >= deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(log.trim(), "hello from written 1", "log: {log:?}");

    let ip: Ipv4Addr = status
        .pod_ip
        .as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no pod IP: {status:?}"));
    let (net, len) = node.pod_subnet();
    let mask = u32::MAX << (32 - u32::from(len));
    assert_eq!(
        u32::from(ip) & mask,
        u32::from(net),
        "pod IP {ip} not on the bridge's {net}/{len}"
    );
    eprintln!(
        "pod ran on the real node at {ip}; {:?} in all",
        t0.elapsed()
    );

    let dir = env.dir().to_path_buf();
    drop(env);
    let left = realnode::mounts_under(&dir);
    assert!(left.is_empty(), "still mounted after shutdown: {left:?}");
}

/// With the real stack, KWOK's node and the real node stand side by side: a pod asking for
/// nothing lands on KWOK's node (the real one is tainted), KWOK leaves the real node to kubelet,
/// and a pod for the real node still runs there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kwok_and_the_real_node_side_by_side() {
    let bins = RealNodeBinaries::locate().expect("real-node parts");
    let env = TestEnv::start_with(TestEnvOptions {
        real_stack: true,
        real_node: true,
        ..TestEnvOptions::default()
    })
    .await
    .expect("real stack with a real node");
    env.import_image(&bins.busybox_archive)
        .expect("importing busybox");
    let ns = env.create_namespace("side-by-side").await;
    let pods: Api<Pod> = Api::namespaced(env.client(), &ns);
    let fake: Pod = serde_json::from_value(json!({
        "metadata": {"name": "fake"},
        "spec": {"containers": [{"name": "main", "image": "nothing-runs-here"}]}
    }))
    .expect("pod");
    let real: Pod = serde_json::from_value(json!({
        "metadata": {"name": "real"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"type": "real"},
            "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{
                "name": "main",
                "image": bins.busybox_image,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "echo real"]
            }]
        }
    }))
    .expect("pod");
    for p in [&fake, &real] {
        pods.create(&PostParams::default(), p)
            .await
            .expect("create");
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let f = pods.get("fake").await.expect("get fake");
        let r = pods.get("real").await.expect("get real");
        let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
        let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
        if phase(&f).as_deref() == Some("Running") && phase(&r).as_deref() == Some("Succeeded") {
            assert_eq!(node(&f).as_deref(), Some("kwok-node-0"));
            assert_eq!(node(&r).as_deref(), Some(NODE_NAME));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fake: {:?} on {:?}; real: {:?} on {:?}",
            f.status,
            node(&f),
            r.status,
            node(&r)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = pods
        .logs("real", &LogParams::default())
        .await
        .expect("real pod's log");
    assert_eq!(log.trim(), "real");
    // KWOK did not take the real node over: kubelet still reports its own version.
    let n = Api::<Node>::all(env.client())
        .get(NODE_NAME)
        .await
        .expect("node");
    let info = n.status.and_then(|s| s.node_info).expect("node info");
    assert_eq!(
        info.kubelet_version,
        numaplane_testenv::binaries::K8S_VERSION
    );
    assert!(info.container_runtime_version.starts_with("containerd://"));
}

/// kube-proxy and CoreDNS on the real node: a Service's ClusterIP, and its name, reach a pod
/// serving on the node, from another pod there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_ip_reaches_a_pod_on_the_real_node() {
    let t0 = Instant::now();
    let bins = RealNodeBinaries::locate().expect("real-node parts");
    let env = TestEnv::start_with(TestEnvOptions {
        real_node: true,
        ..TestEnvOptions::default()
    })
    .await
    .expect("environment with a real node");
    let node = env.real_node().expect("real node");
    env.import_image(&bins.busybox_archive)
        .expect("importing busybox");
    let ns = env.create_namespace("real-service").await;
    let pods: Api<Pod> = Api::namespaced(env.client(), &ns);
    let on_real_node = |name: &str, labels: serde_json::Value, restart: &str, script: &str| {
        serde_json::from_value::<Pod>(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "restartPolicy": restart,
                "nodeSelector": {"type": "real"},
                "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{
                    "name": "main",
                    "image": bins.busybox_image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script]
                }]
            }
        }))
        .expect("pod")
    };
    let server = on_real_node(
        "web",
        json!({"app": "web"}),
        "Always",
        "/bin/busybox mkdir -p /www && echo hello-service > /www/index.html && \
         exec /bin/busybox httpd -f -p 8080 -h /www",
    );
    pods.create(&PostParams::default(), &server)
        .await
        .expect("create server");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .expect("service");
    let svc = Api::<Service>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");
    let cluster_ip = svc.spec.and_then(|s| s.cluster_ip).expect("a ClusterIP");
    // Retries while the endpoints and kube-proxy's rules catch up with the server (no `-T`:
    // busybox-static's wget crashes with it); a failed try's message is shown only if all fail.
    let client = on_real_node(
        "client",
        json!({}),
        "Never",
        &format!(
            "i=0; while [ $i -lt 60 ]; do wget -q -O - http://{cluster_ip}/ 2>/tmp/err && exit 0; \
             i=$((i+1)); sleep 1; done; cat /tmp/err; exit 1"
        ),
    );
    pods.create(&PostParams::default(), &client)
        .await
        .expect("create client");
    let status = wait_finished(&pods, "client").await;
    assert_eq!(
        status.phase.as_deref(),
        Some("Succeeded"),
        "{status:?}\nkube-proxy log: {}",
        numaplane_testenv::controlplane::tail(&node.dir().join("kube-proxy.log"), 30)
    );
    let log = pods
        .logs("client", &LogParams::default())
        .await
        .expect("client log");
    assert_eq!(log.trim(), "hello-service", "log: {log:?}");

    // The same Service by its short name: the node's CoreDNS through kubelet's search path.
    let by_name = on_real_node(
        "by-name",
        json!({}),
        "Never",
        "i=0; while [ $i -lt 60 ]; do wget -q -O - http://web/ 2>/tmp/err && exit 0; \
         i=$((i+1)); sleep 1; done; cat /tmp/err; exit 1",
    );
    pods.create(&PostParams::default(), &by_name)
        .await
        .expect("create by-name client");
    let status = wait_finished(&pods, "by-name").await;
    assert_eq!(
        status.phase.as_deref(),
        Some("Succeeded"),
        "{status:?}\ncoredns log: {}",
        numaplane_testenv::controlplane::tail(&node.dir().join("coredns.log"), 30)
    );
    let log = pods
        .logs("by-name", &LogParams::default())
        .await
        .expect("by-name log");
    assert_eq!(log.trim(), "hello-service", "log: {log:?}");
    eprintln!(
        "{cluster_ip} answered from the real node; {:?} in all",
        t0.elapsed()
    );
}

async fn wait_finished(pods: &Api<Pod>, name: &str) -> k8s_openapi::api::core::v1::PodStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        let p = pods.get(name).await.expect("get pod");
        let status = p.status.unwrap_or_default();
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return status;
        }
        assert!(Instant::now() < deadline, "{name} not finished: {status:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
