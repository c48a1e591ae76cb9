//! Statement parameters: owned values with the type each is sent as, shared by the worker's
//! statements and the job operations.

use tokio_postgres::types::{ToSql, Type};

/// A parameter, owned, with the type it is sent as when unprepared.
pub type Param = (Box<dyn ToSql + Send + Sync>, Type);

/// `value`, sent as `ty`.
pub(crate) fn param<T: ToSql + Send + Sync + 'static>(value: T, ty: Type) -> Param {
    (Box::new(value), ty)
}

/// `params` as tokio-postgres takes them for an unprepared statement.
pub(crate) fn typed(params: &[Param]) -> Vec<(&(dyn ToSql + Sync), Type)> {
    params.iter().map(|(v, t)| (v.as_ref() as &(dyn ToSql + Sync), t.clone())).collect()
}
