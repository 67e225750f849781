//! Git's tree entry modes and object kinds, parsed once from plumbing output.

/// The mode of a tree or index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileMode {
    /// `100644`
    Regular,
    /// `100755`
    Executable,
    /// `120000`
    Symlink,
    /// `160000`: a submodule commit.
    Gitlink,
    /// `040000`
    Tree,
}

impl FileMode {
    pub const ALL: [FileMode; 5] = [
        FileMode::Regular,
        FileMode::Executable,
        FileMode::Symlink,
        FileMode::Gitlink,
        FileMode::Tree,
    ];

    /// Parses git's octal mode string (`ls-tree`, `ls-files -s`, `--index-info`). The legacy
    /// group-writable `100664`, which old trees still carry, is a regular file, as git reads it.
    pub fn parse(s: &str) -> Option<FileMode> {
        if s == "100664" {
            return Some(FileMode::Regular);
        }
        FileMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// The octal string git reads.
    pub fn as_str(self) -> &'static str {
        match self {
            FileMode::Regular => "100644",
            FileMode::Executable => "100755",
            FileMode::Symlink => "120000",
            FileMode::Gitlink => "160000",
            FileMode::Tree => "040000",
        }
    }
}

/// The kind of object a tree entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Blob,
    Tree,
    Commit,
}

impl ObjectKind {
    pub const ALL: [ObjectKind; 3] = [ObjectKind::Blob, ObjectKind::Tree, ObjectKind::Commit];

    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Blob => "blob",
            ObjectKind::Tree => "tree",
            ObjectKind::Commit => "commit",
        }
    }

    pub fn parse(s: &str) -> Option<ObjectKind> {
        ObjectKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_and_unknown_ones_are_refused() {
        for m in [
            FileMode::Regular,
            FileMode::Executable,
            FileMode::Symlink,
            FileMode::Gitlink,
            FileMode::Tree,
        ] {
            assert_eq!(FileMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(FileMode::parse("100664"), Some(FileMode::Regular));
        assert_eq!(FileMode::parse("100600"), None);
        assert_eq!(ObjectKind::parse("tag"), None);
        assert_eq!(ObjectKind::parse("blob"), Some(ObjectKind::Blob));
    }
}
