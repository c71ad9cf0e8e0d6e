//! The identity map: every message goes on unchanged.

use numaflow::map;

use crate::BoxError;

struct Identity;

#[tonic::async_trait]
impl map::Mapper for Identity {
    async fn map(&self, input: map::MapRequest) -> Vec<map::Message> {
        vec![map::Message::new(input.value).with_keys(input.keys)]
    }
}

pub async fn serve() -> Result<(), BoxError> {
    map::Server::new(Identity).start().await
}
