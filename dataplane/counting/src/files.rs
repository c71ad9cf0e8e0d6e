//! The files the test reads: one line per message, one file per container instance.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::fs::{File, OpenOptions};
use tokio::io::AsyncWriteExt;

use crate::BoxError;

#[derive(Clone)]
pub struct CountDir {
    root: PathBuf,
    instance: String,
}

impl CountDir {
    pub fn from_env() -> Result<Self, BoxError> {
        let root = PathBuf::from(std::env::var("COUNT_DIR").unwrap_or_else(|_| "/counting".into()));
        let host = std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().to_string())
            .ok_or("no HOSTNAME and no /etc/hostname")?;
        let started = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
        Ok(Self {
            root,
            instance: format!("{host}.{started}"),
        })
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub fn stopped(&self) -> bool {
        self.root.join("stop").exists()
    }

    /// An append-only log `<root>/<kind>/<instance>`.
    pub async fn log(&self, kind: &str) -> Result<Log, BoxError> {
        let dir = self.root.join(kind);
        tokio::fs::create_dir_all(&dir).await?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(&self.instance))
            .await?;
        Ok(Log { file })
    }
}

pub struct Log {
    file: File,
}

impl Log {
    /// Appends one line per entry and flushes: the host reads the same page cache, so a line
    /// written here is seen even if the container is killed right after.
    pub async fn append<'a>(
        &mut self,
        lines: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), BoxError> {
        let mut buf = String::new();
        for l in lines {
            buf.push_str(l);
            buf.push('\n');
        }
        if !buf.is_empty() {
            self.file.write_all(buf.as_bytes()).await?;
            self.file.flush().await?;
        }
        Ok(())
    }
}
