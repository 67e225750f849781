//! Writing blobs: one at a time, or a validation's thousands with one git process.

use super::{Repo, StagingError};

impl Repo {
    /// Writes `content` as a blob.
    pub fn write_blob(&self, content: &[u8]) -> Result<String, StagingError> {
        let mut cmd = self.git();
        cmd.args(["hash-object", "-w", "--stdin"]);
        let (_, out) = self.run_with_input(cmd, content, &[0])?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// Writes every content as a blob with one git process (`git fast-import`, which packs them)
    /// and returns their ids in order: a validation's thousands of pre- and post-images cost one
    /// process, not one each.
    pub fn write_blobs(&self, contents: &[&[u8]]) -> Result<Vec<String>, StagingError> {
        if contents.is_empty() {
            return Ok(vec![]);
        }
        let tmp = super::scratch_dir("temp marks dir")?;
        let marks = tmp.path().join("marks");
        let mut stream = Vec::with_capacity(contents.iter().map(|c| c.len() + 32).sum());
        for (i, c) in contents.iter().enumerate() {
            stream
                .extend_from_slice(format!("blob\nmark :{}\ndata {}\n", i + 1, c.len()).as_bytes());
            stream.extend_from_slice(c);
            stream.push(b'\n');
        }
        let mut cmd = self.git();
        cmd.arg("fast-import")
            .arg("--quiet")
            .arg(format!("--export-marks={}", marks.display()));
        self.run_with_input(cmd, &stream, &[0])?;
        let text = std::fs::read_to_string(&marks).map_err(|e| StagingError::Io {
            op: "read fast-import marks",
            path: marks.clone(),
            source: e,
        })?;
        let mut ids = vec![String::new(); contents.len()];
        for line in text.lines() {
            let parsed = line
                .strip_prefix(':')
                .and_then(|l| l.split_once(' '))
                .and_then(|(n, oid)| Some((n.parse::<usize>().ok()?, oid)));
            if let Some((n, oid)) = parsed
                && (1..=contents.len()).contains(&n)
            {
                ids[n - 1] = oid.to_string();
            }
        }
        if let Some(missing) = ids.iter().position(String::is_empty) {
            return Err(StagingError::Git {
                args: "fast-import".into(),
                code: None,
                stderr: format!("no id was exported for blob {}", missing + 1),
            });
        }
        Ok(ids)
    }
}
