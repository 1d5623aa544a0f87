//! Small helpers of the end-to-end tests that start processes: a free
//! loopback port, a child process killed when the test ends (also when it
//! panics), and a folder removed when the test ends.

use std::path::PathBuf;
use std::process::Child;

/// A free TCP port on 127.0.0.1 (free when asked; the caller binds it next).
/// Panics when the system has none: in test support, a failed test.
#[allow(clippy::expect_used)]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A child process killed and reaped on drop.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A folder removed with everything in it on drop.
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
