//! The identity map: every message goes on unchanged, after `MAP_DELAY_MS` milliseconds (0 by
//! default; one message at a time, so that a slow map keeps a backlog in its buffer).

use std::time::Duration;

use numaflow::map;

use crate::BoxError;

struct Identity {
    delay: Duration,
    one_at_a_time: tokio::sync::Mutex<()>,
}

#[tonic::async_trait]
impl map::Mapper for Identity {
    async fn map(&self, input: map::MapRequest) -> Vec<map::Message> {
        if !self.delay.is_zero() {
            let _turn = self.one_at_a_time.lock().await;
            tokio::time::sleep(self.delay).await;
        }
        vec![map::Message::new(input.value).with_keys(input.keys)]
    }
}

pub async fn serve() -> Result<(), BoxError> {
    let ms: u64 = std::env::var("MAP_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    map::Server::new(Identity {
        delay: Duration::from_millis(ms),
        one_at_a_time: Default::default(),
    })
    .start()
    .await
}
