//! The durable state of the local cloud: a redb file holding every instance
//! (as JSON, keyed by instance ID) and the address sequence.
//!
//! Every change is committed (fsync'd) before the API answers, so a restarted
//! server on the same file loses nothing. The in-memory view in the server is
//! rebuilt from this file at start.

use crate::wire::Instance;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const INSTANCES: TableDefinition<&str, &[u8]> = TableDefinition::new("instances");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const NEXT_SEQ: &str = "next_seq";

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// redb failed (the file is locked by another server, corrupt, unwritable, ...).
    #[error("store {path}: {source}")]
    Db {
        /// The store file.
        path: PathBuf,
        /// The redb error.
        #[source]
        source: redb::Error,
    },
    /// A stored instance could not be decoded or encoded.
    #[error("store {path}: instance {id}: {source}")]
    Codec {
        /// The store file.
        path: PathBuf,
        /// The instance ID.
        id: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

/// What the store holds when opened.
#[derive(Debug, Default)]
pub struct Loaded {
    /// All instances.
    pub instances: Vec<Instance>,
    /// The next address sequence number.
    pub next_seq: u64,
}

/// The redb store. Cheap to clone; all calls block (run them off the async workers).
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (or creates) the store file and loads its content.
    pub fn open(path: &Path) -> Result<(Store, Loaded), StoreError> {
        let err = |source: redb::Error| StoreError::Db {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| err(e.into()))?;
        }
        let db = Database::create(path).map_err(|e| err(e.into()))?;
        let store = Store {
            db: Arc::new(db),
            path: Arc::new(path.to_path_buf()),
        };
        // Make sure both tables exist, so that reads never meet a missing table.
        let txn = store.db.begin_write().map_err(|e| err(e.into()))?;
        {
            txn.open_table(INSTANCES).map_err(|e| err(e.into()))?;
            txn.open_table(META).map_err(|e| err(e.into()))?;
        }
        txn.commit().map_err(|e| err(e.into()))?;
        let loaded = store.load()?;
        Ok((store, loaded))
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, source: impl Into<redb::Error>) -> StoreError {
        StoreError::Db {
            path: self.path.to_path_buf(),
            source: source.into(),
        }
    }

    /// Everything the store holds (what a restarted server starts from).
    pub fn load(&self) -> Result<Loaded, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = txn.open_table(INSTANCES).map_err(|e| self.err(e))?;
        let mut instances = Vec::new();
        for item in table.iter().map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let inst: Instance =
                serde_json::from_slice(v.value()).map_err(|source| StoreError::Codec {
                    path: self.path.to_path_buf(),
                    id: k.value().to_string(),
                    source,
                })?;
            instances.push(inst);
        }
        let meta = txn.open_table(META).map_err(|e| self.err(e))?;
        let stored_seq = meta
            .get(NEXT_SEQ)
            .map_err(|e| self.err(e))?
            .map_or(0, |g| g.value());
        let max_seq = instances.iter().map(|i| i.seq + 1).max().unwrap_or(0);
        Ok(Loaded {
            instances,
            next_seq: stored_seq.max(max_seq),
        })
    }

    /// Writes (inserts or replaces) an instance and the next sequence number in one transaction.
    pub fn put(&self, inst: &Instance, next_seq: u64) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(inst).map_err(|source| StoreError::Codec {
            path: self.path.to_path_buf(),
            id: inst.id.clone(),
            source,
        })?;
        let txn = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut t = txn.open_table(INSTANCES).map_err(|e| self.err(e))?;
            t.insert(inst.id.as_str(), bytes.as_slice())
                .map_err(|e| self.err(e))?;
            let mut m = txn.open_table(META).map_err(|e| self.err(e))?;
            m.insert(NEXT_SEQ, next_seq).map_err(|e| self.err(e))?;
        }
        txn.commit().map_err(|e| self.err(e))
    }

    /// Removes an instance; `false` when it was not stored.
    pub fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let txn = self.db.begin_write().map_err(|e| self.err(e))?;
        let existed = {
            let mut t = txn.open_table(INSTANCES).map_err(|e| self.err(e))?;
            let old = t.remove(id).map_err(|e| self.err(e))?;
            old.is_some()
        };
        txn.commit().map_err(|e| self.err(e))?;
        Ok(existed)
    }

    /// Starts a write transaction and keeps it open (tests: every other write
    /// waits until it is aborted).
    #[cfg(test)]
    pub(crate) fn hold_writes(&self) -> redb::WriteTransaction {
        self.db.begin_write().expect("a write transaction")
    }
}
