//! The recording sink: a message is written to the delivered log before it is acknowledged.

use numaflow::sink::{self, Response, SinkRequest};
use tokio::sync::{Mutex, mpsc};

use crate::BoxError;
use crate::files::{CountDir, Log};

struct Recorder {
    log: Mutex<Log>,
    fail: bool,
}

#[tonic::async_trait]
impl sink::Sinker for Recorder {
    async fn sink(&self, mut input: mpsc::Receiver<SinkRequest>) -> Vec<Response> {
        let mut batch = Vec::new();
        while let Some(req) = input.recv().await {
            batch.push(req);
        }
        if self.fail {
            return batch
                .into_iter()
                .map(|r| {
                    Response::failure(r.id, "SINK_FAIL=1: this sink fails every message".into())
                })
                .collect();
        }
        // `<unix ms> <message>`: the time tells the test the longest wait between deliveries.
        let now = chrono::Utc::now().timestamp_millis();
        let values: Vec<String> = batch
            .iter()
            .map(|r| format!("{now} {}", String::from_utf8_lossy(&r.value)))
            .collect();
        let written = self
            .log
            .lock()
            .await
            .append(values.iter().map(String::as_str))
            .await;
        batch
            .into_iter()
            .map(|r| match &written {
                Ok(()) => Response::ok(r.id),
                Err(e) => Response::failure(r.id, format!("recording failed: {e}")),
            })
            .collect()
    }
}

pub async fn serve(dir: CountDir) -> Result<(), BoxError> {
    let fail = std::env::var("SINK_FAIL").is_ok_and(|v| v == "1");
    let log = Mutex::new(dir.log("delivered").await?);
    sink::Server::new(Recorder { log, fail }).start().await
}
