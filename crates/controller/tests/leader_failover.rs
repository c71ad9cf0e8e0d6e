//! Leader failover in the middle of a pause-and-drain, proven from the API server's audit log:
//! the leader is stopped (SIGSTOP) once it has asked the pipeline to pause, the standby takes the
//! lease and finishes the upgrade, the old leader is let run again, and the audit log shows that
//! no two replicas wrote in the same interval: every write of the old leader completed before the
//! new one's first. Prints the takeover time against the lease duration.

mod support;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use numaplane_api::numaflow::Pipeline;
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use numaplane_testenv::{TestEnv, TestEnvOptions};
use serde_json::{Value, json};
use std::time::{Duration, SystemTime};
use support::scenario::{CAT, isb, settled, three_vertices, two_vertices};
use support::{
    Process, eventually, install_numaflow, install_rbac, label_after_failover, lease_holder, repo,
    samples,
};

/// The controller's lease duration (`main.rs`).
const LEASE_DURATION: Duration = Duration::from_secs(15);

/// Only writes are audited: reads would bury them.
const WRITES_ONLY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    verbs: [get, list, watch]
  - level: Metadata
";

/// One audited write of a replica: when the API server received it and when it answered.
#[derive(Debug)]
struct Write {
    replica: char,
    received: SystemTime,
    completed: SystemTime,
    /// A write to the lease itself (renewals, the takeover), not fenced.
    lease: bool,
    what: String,
}

fn time(v: &Value) -> SystemTime {
    let t: k8s_openapi::jiff::Timestamp = v
        .as_str()
        .expect("audit timestamp")
        .parse()
        .expect("RFC 3339 timestamp");
    SystemTime::from(t)
}

/// The writes of replicas `a` and `b` (named in their User-Agent), in the order received.
fn audited_writes(log: &str) -> Vec<Write> {
    let mut writes: Vec<Write> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| {
            let agent = e["userAgent"].as_str()?;
            let replica = ['a', 'b']
                .into_iter()
                .find(|r| agent.starts_with("numaplane/") && agent.contains(&format!("({r}_")))?;
            let verb = e["verb"].as_str()?;
            let resource = e["objectRef"]["resource"].as_str().unwrap_or_default();
            if !matches!(verb, "create" | "update" | "patch" | "delete") {
                return None;
            }
            Some(Write {
                replica,
                received: time(&e["requestReceivedTimestamp"]),
                completed: time(&e["stageTimestamp"]),
                lease: resource == "leases",
                what: format!(
                    "{verb} {resource}/{} -> {}",
                    e["objectRef"]["name"].as_str().unwrap_or_default(),
                    e["responseStatus"]["code"]
                ),
            })
        })
        .collect();
    writes.sort_by_key(|w| w.received);
    writes
}

fn secs(d: &Result<Duration, std::time::SystemTimeError>) -> f64 {
    d.as_ref().map_or(f64::NAN, |d| d.as_secs_f64())
}

#[tokio::test]
async fn a_stopped_leader_never_writes_beside_its_successor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.log");
    let env = TestEnv::start_with(TestEnvOptions {
        real_stack: true,
        audit_log: Some(audit.clone()),
        audit_policy: Some(WRITES_ONLY.into()),
        ..Default::default()
    })
    .await
    .expect("control plane with an audit log");
    let client = env.client();
    install_rbac(&client).await;
    let ns = env.create_namespace("failover").await;
    let history = support::invariants::Recorder::start(&client, &ns).await;
    let config = dir.path().join("config.yaml");
    let config_text = "defaultUpgradeStrategy: pause-and-drain\n";
    std::fs::write(&config, config_text).expect("config");
    history.configure(config_text);
    let leases: Api<Lease> = Api::namespaced(client.clone(), "numaplane-system");
    // The shipped USDE config says which changes lose data, as installed.
    let usde: ConfigMap = serde_saphyr::from_str(
        &std::fs::read_to_string(repo("config/manager/usde-config.yaml")).expect("usde"),
    )
    .expect("parse usde-config.yaml");
    Api::<ConfigMap>::namespaced(client.clone(), "numaplane-system")
        .create(&PostParams::default(), &usde)
        .await
        .expect("create the USDE ConfigMap");

    let a = Process::start(&env, &ns, &config, dir.path(), "a", &["--leader-elect"]);
    eventually("a holds the lease", || async {
        lease_holder(&leases).await.filter(|h| h.starts_with("a_"))
    })
    .await;
    install_numaflow(&client, "numaplane-system", &ns, "1.8.1").await;
    let b = Process::start(&env, &ns, &config, dir.path(), "b", &["--leader-elect"]);
    eventually("b ready as a warm standby", || async {
        (b.probe("/readyz").await == Some(200)).then_some(())
    })
    .await;

    let isbrs: Api<ISBServiceRollout> = Api::namespaced(client.clone(), &ns);
    let prs: Api<PipelineRollout> = Api::namespaced(client.clone(), &ns);
    let pipelines: Api<Pipeline> = Api::namespaced(client.clone(), &ns);
    let pr = |spec: Value| -> PipelineRollout {
        serde_json::from_value(json!({
            "apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "PipelineRollout",
            "metadata": {"name": "pr"}, "spec": {"pipeline": {"spec": spec}}
        }))
        .expect("PipelineRollout")
    };
    isbrs
        .create(
            &PostParams::default(),
            &serde_json::from_value(isb("2.10.17", "10Mi", None)).expect("isbr"),
        )
        .await
        .expect("create isbr");
    prs.create(&PostParams::default(), &pr(two_vertices(30)))
        .await
        .expect("create pr");
    // Running with data in flight: a pipeline that never ran is updated without a pause.
    eventually("pr and isb settled by the leader, pr-0 running", || async {
        settled(prs.get("pr").await.ok().as_ref())?;
        settled(isbrs.get("isb").await.ok().as_ref())?;
        let p = pipelines.get("pr-0").await.ok()?;
        (p.status?.get("phase")? == "Running").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // A topology change: the leader asks the pipeline to pause and drain, and is stopped there.
    // (A change that meets the pipeline in Numaflow's one-pass Failed state is applied without a
    // pause, as it should be: then the topology is changed back, up to three times.)
    let mut vertices = 2;
    for attempt in 1.. {
        vertices = 5 - vertices;
        let spec = if vertices == 3 {
            three_vertices(CAT, 30)
        } else {
            two_vertices(30)
        };
        // Messages in flight for a few seconds: the pause lasts long enough to be seen and to
        // stop the leader in (a drained pipeline pauses, updates and resumes between two polls).
        env.real()
            .expect("the real stack has a daemon stand-in")
            .daemon()
            .drain_after(&ns, "pr-0", Duration::from_secs(10));
        let mut live = prs.get("pr").await.expect("pr");
        live.spec = pr(spec).spec;
        live.metadata.managed_fields = None;
        prs.replace("pr", &PostParams::default(), &live)
            .await
            .expect("update pr");
        let pausing = eventually("the leader pauses pr-0 or applies the change", || async {
            let p = pipelines.get("pr-0").await.ok()?;
            if p.spec.pointer("/lifecycle/desiredPhase") == Some(&json!("Paused")) {
                return Some(true);
            }
            let applied = p.spec["vertices"].as_array().map(Vec::len) == Some(vertices);
            let running = p.status?.get("phase")? == "Running";
            (applied && running).then_some(false)
        })
        .await;
        if pausing {
            break;
        }
        // Why it was not paused, should this be the last attempt: the operator says in an Event.
        let said: Vec<String> =
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .map(|l| l.items.into_iter().filter_map(|e| e.note).collect())
                .unwrap_or_default();
        assert!(
            attempt < 3,
            "three changes applied without a pause; the operator said: {said:#?}"
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    a.signal("-STOP");
    let stopped = SystemTime::now();

    eventually("b takes the lease", || async {
        lease_holder(&leases).await.filter(|h| h.starts_with("b_"))
    })
    .await;
    eventually("b finishes the pause-and-drain a started", || async {
        let p = pipelines.get("pr-0").await.ok()?;
        let r = prs.get("pr").await.ok()?;
        (p.spec["vertices"].as_array()?.len() == vertices
            && p.spec.pointer("/lifecycle/desiredPhase").is_none()
            && settled(Some(&r)).is_some())
        .then_some(())
    })
    .await;

    // The old leader runs again, its caches stale and its in-progress recheck (20 s) overdue: it
    // must find it lost the lease before writing anything, and leave a later change to b.
    let frozen = Duration::from_secs(25);
    if let Ok(left) = (stopped + frozen).duration_since(SystemTime::now()) {
        tokio::time::sleep(left).await;
    }
    a.signal("-CONT");
    let resumed = SystemTime::now();
    eventually("a sees it is no longer leader", || async {
        let m = a.metrics_text().await;
        (samples(&m, "numaplane_leader").first().map(|s| s.1) == Some(0.0)).then_some(())
    })
    .await;
    label_after_failover(&client, &ns, "b applies a change made after a resumed").await;
    assert!(
        lease_holder(&leases)
            .await
            .is_some_and(|h| h.starts_with("b_"))
    );
    assert_eq!(
        a.probe("/readyz").await,
        Some(200),
        "a stays up as a standby"
    );

    // The audit log: a's writes all completed before b's first one was received.
    let audited = audited_writes(&std::fs::read_to_string(&audit).expect("audit log"));
    let writes: Vec<&Write> = audited.iter().filter(|w| !w.lease).collect();
    let first_b = *writes
        .iter()
        .find(|w| w.replica == 'b')
        .expect("b wrote after taking over");
    let last_a = *writes
        .iter()
        .filter(|w| w.replica == 'a')
        .max_by_key(|w| w.completed)
        .expect("a wrote while leading");
    let overlapping: Vec<&&Write> = writes
        .iter()
        .filter(|w| w.replica == 'a' && w.completed >= first_b.received)
        .collect();
    assert!(
        overlapping.is_empty(),
        "the old leader wrote after its successor's first write ({first_b:?}): {overlapping:#?}"
    );
    // a's last renewal before the stop, and b's first lease write after it (the takeover).
    let renewed = audited
        .iter()
        .filter(|w| w.lease && w.replica == 'a' && w.received <= stopped)
        .map(|w| w.received)
        .max()
        .expect("a renewed its lease");
    let took = audited
        .iter()
        .find(|w| w.lease && w.replica == 'b' && w.received > stopped)
        .map(|w| w.received)
        .expect("b wrote the lease after the stop");
    // Counted from when the API server received the renewal: the renewTime it carries was
    // stamped when it was sent, a few milliseconds earlier, so `late` may be slightly negative.
    let expired = renewed + LEASE_DURATION;
    let late = match took.duration_since(expired) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    };
    let takeover = first_b.received.duration_since(stopped);
    let quiet = first_b.received.duration_since(last_a.completed);
    let fenced = samples(&a.metrics_text().await, "numaplane_fenced_writes_total")
        .first()
        .map_or(0.0, |s| s.1);
    println!(
        "FIGURE leader failover: stop -> standby's first write {:.1} s; the lease ({} s) \
         expired {:.1} s after the stop and was taken {:.2} s after that; no writes for {:.1} s \
         between leaders; {} writes of the old leader refused after SIGCONT at +{:.1} s; \
         {} audited writes (a {}, b {}); a's last: {}; b's first: {}",
        secs(&takeover),
        LEASE_DURATION.as_secs(),
        secs(&expired.duration_since(stopped)),
        late,
        secs(&quiet),
        fenced,
        secs(&resumed.duration_since(stopped)),
        writes.len(),
        writes.iter().filter(|w| w.replica == 'a').count(),
        writes.iter().filter(|w| w.replica == 'b').count(),
        last_a.what,
        first_b.what,
    );
    // The standby takes the lease at its first look after it expired: within a few seconds
    // (a random pause of up to a second against a collision, a request or two).
    assert!(
        (-0.5..=5.0).contains(&late),
        "the lease was taken {late:.3} s after it expired"
    );
    history.assert_held(&client, &ns).await;
    drop(b);
    drop(a);
}
