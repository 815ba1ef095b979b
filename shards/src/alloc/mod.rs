//! ID allocation (placeholder while being written).

pub mod durable;
