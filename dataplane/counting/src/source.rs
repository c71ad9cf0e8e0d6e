//! The numbered source: `<instance>/<seq>` at a steady rate; acknowledged messages are logged
//! as produced, negatively acknowledged ones are sent again.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use chrono::Utc;
use numaflow::source::{self, Message, NackOffset, Offset, SourceReadRequest};
use tokio::sync::{Mutex, mpsc::Sender};

use crate::BoxError;
use crate::files::{CountDir, Log};

struct State {
    started: Instant,
    /// Next fresh sequence number; also how many fresh messages the rate has allowed so far.
    next: u64,
    /// Read but not yet acknowledged.
    inflight: BTreeSet<u64>,
    /// Negatively acknowledged: sent again before fresh ones.
    again: BTreeSet<u64>,
}

struct Numbered {
    dir: CountDir,
    rate: f64,
    state: Mutex<State>,
    produced: Mutex<Log>,
}

impl Numbered {
    /// The message itself: Numaflow derives the message's ID in the ISB from the offset, and
    /// JetStream drops a message whose ID it saw within its duplicate window, so offsets must
    /// never repeat across container instances (a bare sequence number would).
    fn offset(&self, seq: u64) -> Offset {
        Offset {
            offset: self.message(seq).into_bytes(),
            partition_id: 0,
        }
    }

    fn message(&self, seq: u64) -> String {
        format!("{}/{seq}", self.dir.instance())
    }

    fn seq(offset: &Offset) -> Option<u64> {
        let text = std::str::from_utf8(&offset.offset).ok()?;
        text.rsplit_once('/')?.1.parse().ok()
    }

    /// The sequence numbers to send now: the re-sends first, then as many fresh ones as the
    /// rate allows, up to `count`.
    async fn take(&self, count: usize) -> Vec<u64> {
        let mut st = self.state.lock().await;
        let mut out: Vec<u64> = Vec::new();
        while out.len() < count {
            let Some(s) = st.again.pop_first() else { break };
            out.push(s);
        }
        if !self.dir.stopped() {
            let allowed = (st.started.elapsed().as_secs_f64() * self.rate) as u64;
            while out.len() < count && st.next < allowed {
                out.push(st.next);
                st.next += 1;
            }
        }
        st.inflight.extend(out.iter().copied());
        out
    }
}

#[tonic::async_trait]
impl source::Sourcer for Numbered {
    async fn read(&self, request: SourceReadRequest, transmitter: Sender<Message>) {
        let deadline = Instant::now() + request.timeout;
        let mut seqs = self.take(request.count).await;
        while seqs.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20).min(request.timeout)).await;
            seqs = self.take(request.count).await;
        }
        for seq in seqs {
            let msg = Message {
                value: self.message(seq).into_bytes(),
                offset: self.offset(seq),
                event_time: Utc::now(),
                keys: vec![],
                headers: Default::default(),
                user_metadata: None,
            };
            if transmitter.send(msg).await.is_err() {
                return;
            }
        }
    }

    async fn ack(&self, offsets: Vec<Offset>) {
        let mut done = Vec::new();
        {
            let mut st = self.state.lock().await;
            for o in &offsets {
                if let Some(s) = Self::seq(o)
                    && st.inflight.remove(&s)
                {
                    done.push(self.message(s));
                }
            }
        }
        if let Err(e) = self
            .produced
            .lock()
            .await
            .append(done.iter().map(String::as_str))
            .await
        {
            eprintln!("recording produced messages failed: {e}");
        }
    }

    async fn nack(&self, offsets: Vec<NackOffset>) {
        let mut st = self.state.lock().await;
        for o in &offsets {
            if let Some(s) = Self::seq(&o.offset)
                && st.inflight.remove(&s)
            {
                st.again.insert(s);
            }
        }
    }

    async fn pending(&self) -> Option<usize> {
        Some(0)
    }
}

pub async fn serve(dir: CountDir) -> Result<(), BoxError> {
    let rate: f64 = std::env::var("RATE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20.0);
    let produced = Mutex::new(dir.log("produced").await?);
    let state = Mutex::new(State {
        started: Instant::now(),
        next: 0,
        inflight: BTreeSet::new(),
        again: BTreeSet::new(),
    });
    source::Server::new(Numbered {
        dir,
        rate,
        state,
        produced,
    })
    .start()
    .await
}
