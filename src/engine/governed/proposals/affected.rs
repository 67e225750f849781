//! Which resources a patch affects, and which claims cover them (pure).

use crate::domain::claim::{ResourceId, directory_contains};
use crate::engine::error::ServiceError;
use crate::limits;
use crate::patch::Patch;

/// Does resource `r` cover the touched path `path` (so no `file:` resource is added for it)?
pub(super) fn names_path(r: &ResourceId, path: &str) -> bool {
    match r {
        ResourceId::File { path: p } | ResourceId::Symbol { path: p, .. } => p == path,
        ResourceId::Directory { path: d } => directory_contains(d, path),
        ResourceId::Other { .. } => false,
    }
}

/// The affected resources: the given ids (deduplicated, order kept), then `file:<path>` for
/// every touched path none of them names (so every path the patch touches is claimed).
pub(super) fn affected_resources(
    given: Option<&[String]>,
    patch: &Patch,
) -> Result<Vec<ResourceId>, ServiceError> {
    let mut out: Vec<ResourceId> = Vec::new();
    for (i, id) in given.unwrap_or_default().iter().enumerate() {
        let r = ResourceId::parse(id).map_err(|m| {
            ServiceError::invalid_field(
                format!("affected_resources[{i}]"),
                format!("affected_resources[{i}] {id:?}: {m}"),
            )
        })?;
        if !out.contains(&r) {
            out.push(r);
        }
    }
    for f in &patch.files {
        for path in f.paths() {
            if !out.iter().any(|r| names_path(r, path)) {
                out.push(ResourceId::File { path: path.into() });
            }
        }
    }
    if out.len() > limits::MAX_AFFECTED_RESOURCES {
        return Err(ServiceError::invalid_field(
            "affected_resources",
            format!(
                "the proposal affects {} resources; the limit is {}",
                out.len(),
                limits::MAX_AFFECTED_RESOURCES
            ),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touched_paths_not_named_become_file_resources_once() {
        let patch = crate::patch::parse(
            b"diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n\
              diff --git a/d/z b/d/z\n--- a/d/z\n+++ b/d/z\n@@ -1 +1 @@\n-a\n+b\n",
        )
        .unwrap();
        let given = vec!["directory:d".to_string(), "directory:d".to_string()];
        let ids: Vec<String> = affected_resources(Some(&given), &patch)
            .unwrap()
            .iter()
            .map(ResourceId::id)
            .collect();
        assert_eq!(ids, ["directory:d", "file:x", "file:y"]);
        let bad = vec!["file:../x".to_string()];
        let e = affected_resources(Some(&bad), &patch).unwrap_err();
        assert!(e.to_string().contains("affected_resources[0]"), "{e}");
    }
}
