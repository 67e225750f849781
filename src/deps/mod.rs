//! The dependency phase's parts that know no workflow: what a profile's dependency set is
//! ([`spec`]: its inputs, key, fetch command and what a job needs to use it offline), the egress
//! proxy that is a fetch's only way out ([`egress`]), and the content-addressed store of sets
//! ([`store`]). The phase itself (fetching in the sandbox, waiting for a fetch another job
//! started, mounting the set for a job) is `engine::runner::deps`.

pub mod egress;
pub mod spec;
pub mod store;
