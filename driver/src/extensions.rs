//! Application state for tasks: values the application hands the worker once
//! ([`WorkerOptions::add_extension`](crate::WorkerOptions::add_extension)) and every task
//! reaches by type ([`JobContext::extension`](crate::JobContext::extension)).
//!
//! A typed task is built from its payload alone, so a database pool, an HTTP client or a
//! configuration cannot be fields of it: they live here, one value per type, shared by
//! every job of the worker (a value needing mutation brings its own lock). A task asking
//! for a type nobody added gets [`MissingExtension`], an error naming the type, so the
//! mistake shows in `last_error` instead of as a panic.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

/// Values by type. Shared, so a run layer adding one for a job copies the map, not the
/// values.
#[derive(Default, Clone)]
pub(crate) struct Extensions(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl Extensions {
    /// Keep `value` for its type, replacing an earlier value of that type.
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`.
    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Result<&T, MissingExtension> {
        (self.0.get(&TypeId::of::<T>()))
            .and_then(|value| value.downcast_ref::<T>())
            .ok_or(MissingExtension { type_name: std::any::type_name::<T>() })
    }
}

/// A task asked for application state of a type the worker was not given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error("no extension of type {type_name}: add one with WorkerOptions::add_extension")]
pub struct MissingExtension {
    /// The type asked for.
    pub type_name: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Db(&'static str);

    #[test]
    fn values_are_found_by_type_and_a_missing_one_is_named() {
        let mut extensions = Extensions::default();
        extensions.insert(Db("first"));
        extensions.insert(Db("second"));
        extensions.insert(7u32);
        assert_eq!(extensions.get::<Db>(), Ok(&Db("second")), "the last value of a type wins");
        assert_eq!(extensions.get::<u32>(), Ok(&7));
        // (`type_name`'s text is not promised to stay the same across compilers: only its end.)
        let missing = extensions.get::<String>().unwrap_err().to_string();
        assert!(
            missing.starts_with("no extension of type ") && missing.contains("String: add one with"),
            "{missing}"
        );
    }
}
