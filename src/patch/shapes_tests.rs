//! Shapes git writes that the grammar reads as one change: a type change (a deletion and a
//! creation of one path) and a copy of a path another section changes (`git diff -C -C`).

use super::*;

fn refused(patch: &str, needle: &str) {
    match parse(patch.as_bytes()) {
        Ok(p) => panic!("accepted {p:?}\n{patch}"),
        Err(e) => assert!(e.to_string().contains(needle), "{e}\n{patch}"),
    }
}

#[test]
fn a_type_change_is_one_change_and_a_copy_may_read_a_path_another_section_changes() {
    let tc = parse(
        b"diff --git a/l b/l\ndeleted file mode 120000\n--- a/l\n+++ /dev/null\n@@ -1 +0,0 @@\n-f\n\\ No newline at end of file\n\
          diff --git a/l b/l\nnew file mode 100644\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+content\n",
    )
    .unwrap();
    assert_eq!(tc.files.len(), 1, "{tc:?}");
    let f = &tc.files[0];
    assert_eq!(f.kind, ChangeKind::TypeChange);
    assert_eq!(
        (f.old_mode, f.new_mode),
        (Some(FileMode::Symlink), Some(FileMode::Regular))
    );
    assert_eq!((f.added, f.removed), (1, 1));
    assert_eq!(f.paths().collect::<Vec<_>>(), ["l"]);
    // Deleting and creating a path of the same kind is still one path touched twice.
    refused(
        "diff --git a/x b/x\ndeleted file mode 100644\n--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n\
         diff --git a/x b/x\nnew file mode 100644\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+b\n",
        "touched twice",
    );
    // git diff -C -C: a copy of a file the same patch modifies (git copies the original).
    let cc = parse(
        b"diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n\
          diff --git a/a b/c\nsimilarity index 100%\ncopy from a\ncopy to c\n",
    )
    .unwrap();
    assert_eq!(cc.files.len(), 2);
    // But a copy's destination is still touched once.
    refused(
        "diff --git a/a b/c\nsimilarity index 100%\ncopy from a\ncopy to c\n\
         diff --git a/c b/c\n--- a/c\n+++ b/c\n@@ -1 +1 @@\n-x\n+y\n",
        "touched twice",
    );
}
