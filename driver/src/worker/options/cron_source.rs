//! The crontab sources of [`WorkerOptions::cron`](super::WorkerOptions::cron):
//! text, a file, or typed items, each read into items by `init`.

use crate::error::Error;
use formica_core::cron::{self, Cron, CronItem, Crontab};
use std::path::{Path, PathBuf};

/// Recurring jobs for [`WorkerOptions::cron`](super::WorkerOptions::cron): crontab text (`&str`, `String`), a
/// crontab file (`&Path`, `PathBuf`), or typed items ([`Cron`], `Vec<Cron>`).
#[derive(Debug, Clone)]
pub enum CronSource {
    /// Crontab text.
    Text(String),
    /// A crontab file, read by `init`.
    File(PathBuf),
    /// Items built in code.
    Items(Vec<Cron>),
}

impl From<&str> for CronSource {
    fn from(text: &str) -> Self {
        CronSource::Text(text.to_owned())
    }
}
impl From<String> for CronSource {
    fn from(text: String) -> Self {
        CronSource::Text(text)
    }
}
impl From<&Path> for CronSource {
    fn from(path: &Path) -> Self {
        CronSource::File(path.to_owned())
    }
}
impl From<PathBuf> for CronSource {
    fn from(path: PathBuf) -> Self {
        CronSource::File(path)
    }
}
impl From<Cron> for CronSource {
    fn from(item: Cron) -> Self {
        CronSource::Items(vec![item])
    }
}
impl From<Vec<Cron>> for CronSource {
    fn from(items: Vec<Cron>) -> Self {
        CronSource::Items(items)
    }
}

impl CronSource {
    /// The items, or the parser's error naming where the mistake is.
    pub(super) fn items(self) -> Result<Vec<CronItem>, Error> {
        let crontab = match self {
            CronSource::Text(text) => cron::parse(&text).map_err(crontab_error("text"))?,
            CronSource::File(path) => {
                let origin = format!("file {}", path.display());
                let text = std::fs::read_to_string(&path).map_err(crontab_error(&origin))?;
                cron::parse(&text).map_err(crontab_error(&origin))?
            }
            CronSource::Items(items) => {
                let items = items.into_iter().map(Cron::build).collect::<Result<Vec<_>, _>>();
                Crontab::from_items(items.map_err(crontab_error("items"))?).map_err(crontab_error("items"))?
            }
        };
        Ok(crontab.into_items())
    }
}

/// Wraps a crontab problem from `origin` in [`Error::Crontab`].
pub(super) fn crontab_error<E: std::error::Error + Send + Sync + 'static>(
    origin: &str,
) -> impl FnOnce(E) -> Error + '_ {
    move |e| Error::Crontab { origin: origin.to_owned(), source: Box::new(e) }
}
