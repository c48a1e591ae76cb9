//! Worker machine target: (in progress)

/// Drives the worker machine with operations decoded from the bytes.
pub fn check(_data: &[u8]) {}
