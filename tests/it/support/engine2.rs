//! A second, real Docker engine beside the machine's own: its own data root, exec root and
//! containerd namespace, no bridge or iptables, reached only over mutual TLS on a loopback port
//! with certificates generated here (openssl). It shares no directory with Airlock's data dir
//! that Airlock could use: its jobs' workspaces must be uploaded. Started by the test that
//! needs it and stopped (with its containers, volumes and directories) when that test's handle
//! drops; it also dies with the test's thread.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the engine may take to answer after it was started.
const START_WAIT: Duration = Duration::from_secs(60);

pub struct SecondEngine {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Option<Child>,
    /// Stopped by [`SecondEngine::hang`] and not yet let go.
    hung: bool,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA.
pub(crate) fn make_certs(dir: &Path) {
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=airlock-test-ca",
        ],
    );
    for who in ["server", "client"] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{who}.key"),
                "-out",
                &format!("{who}.csr"),
                "-subj",
                &format!("/CN=airlock-test-{who}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{who}.pem"),
                "-days",
                "2",
                "-extfile",
                &format!("{who}.ext"),
            ],
        );
    }
}

impl SecondEngine {
    /// Starts the engine and loads `images` (from the machine's engine) into it, keeping their
    /// ids.
    pub fn start(images: &[&str]) -> SecondEngine {
        SecondEngine::start_with(images, "{}")
    }

    /// [`SecondEngine::start`] with gVisor's runsc registered, as the README tells operators
    /// to (`--network=none`).
    pub fn start_with_runsc(images: &[&str]) -> SecondEngine {
        let runsc = ["/usr/bin/runsc", "/usr/sbin/runsc", "/usr/local/bin/runsc"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("runsc is installed (scripts/install-prereqs.sh)");
        SecondEngine::start_with(
            images,
            &format!(
                r#"{{"runtimes": {{"runsc": {{"path": "{runsc}", "runtimeArgs": ["--network=none"]}}}}}}"#
            ),
        )
    }

    /// [`SecondEngine::start`] with `daemon_json` as the engine's config file.
    pub fn start_with(images: &[&str], daemon_json: &str) -> SecondEngine {
        let dir = tempfile::Builder::new()
            .prefix("airlock-engine2-")
            .tempdir()
            .unwrap();
        let certs = dir.path().join("certs");
        std::fs::create_dir(&certs).unwrap();
        make_certs(&certs);
        std::fs::write(dir.path().join("daemon.json"), daemon_json).unwrap();
        let port = super::free_port();
        let mut e = SecondEngine {
            dir,
            port,
            child: None,
            hung: false,
        };
        e.spawn();
        for image in images {
            e.load(image);
        }
        e
    }

    /// Starts dockerd on this engine's directories and port and waits until it answers.
    fn spawn(&mut self) {
        let root = self.dir.path().to_path_buf();
        let certs = root.join("certs");
        let p = |s: &str| root.join(s);
        let ns = format!("airlock-test-{}", self.port);
        let mut cmd = Command::new("dockerd");
        cmd.arg("--data-root")
            .arg(p("data"))
            .arg("--exec-root")
            .arg(p("exec"))
            .arg("--pidfile")
            .arg(p("docker.pid"))
            .arg("--config-file")
            .arg(p("daemon.json"))
            .args(["--containerd-namespace", &ns])
            .args(["--containerd-plugins-namespace", &format!("{ns}-plugins")])
            .args(["--bridge=none", "--iptables=false", "--ip-masq=false"])
            .args(["-H", &format!("tcp://127.0.0.1:{}", self.port)])
            .arg("--tlsverify")
            .arg("--tlscacert")
            .arg(certs.join("ca.pem"))
            .arg("--tlscert")
            .arg(certs.join("server.pem"))
            .arg("--tlskey")
            .arg(certs.join("server.key"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(p("dockerd.log")).unwrap())
            .stderr(std::fs::File::create(p("dockerd.err")).unwrap());
        airlock::process::dies_with_parent(&mut cmd);
        self.child = Some(cmd.spawn().expect("dockerd starts"));
        let deadline = Instant::now() + START_WAIT;
        loop {
            let ok = self
                .docker(&["version", "--format", "{{.Server.Version}}"])
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the second engine did not answer within {START_WAIT:?}: {}",
                std::fs::read_to_string(p("dockerd.err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kills the engine outright (SIGKILL), as a machine that drops off the network would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // The containerd this dockerd started goes with it (a restart starts a fresh one).
        let pidfile = self.dir.path().join("exec/containerd/containerd.pid");
        if let Ok(pid) = std::fs::read_to_string(&pidfile) {
            let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
            std::thread::sleep(Duration::from_millis(200));
            let _ = std::fs::remove_file(&pidfile);
        }
    }

    /// Stops the engine where it stands (SIGSTOP): it accepts connections and answers nothing,
    /// as a hung engine does; its containers (under containerd) keep running.
    pub fn hang(&mut self) {
        let pid = self.child.as_ref().expect("the engine runs").id();
        let ok = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        self.hung = true;
    }

    /// Lets a hung engine go on (SIGCONT).
    pub fn unhang(&mut self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.hung = false;
    }

    /// Starts the killed engine again on the same data root (its containers and volumes are
    /// still recorded there).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart of a running engine");
        let _ = std::fs::remove_file(self.dir.path().join("docker.pid"));
        self.spawn();
    }

    pub fn certs(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    /// The `[[engines]]` entry Airlock reaches this engine with.
    pub fn config(&self, name: &str, max_jobs: usize) -> String {
        let c = self.certs();
        format!(
            "[[engines]]\nname = \"{name}\"\nhost = \"tcp://127.0.0.1:{}\"\nmax_jobs = {max_jobs}\n\
             tls = {{ ca = \"{}\", cert = \"{}\", key = \"{}\" }}\n",
            self.port,
            c.join("ca.pem").display(),
            c.join("client.pem").display(),
            c.join("client.key").display()
        )
    }

    /// The docker CLI pointed at this engine (and never at the machine's own).
    pub fn docker(&self, args: &[&str]) -> Command {
        let c = self.certs();
        let mut cmd = Command::new("docker");
        cmd.env_remove("DOCKER_HOST")
            .env_remove("DOCKER_TLS_VERIFY")
            .env_remove("DOCKER_CERT_PATH")
            .args([
                "-H",
                &format!("tcp://127.0.0.1:{}", self.port),
                "--tlsverify",
            ])
            .arg("--tlscacert")
            .arg(c.join("ca.pem"))
            .arg("--tlscert")
            .arg(c.join("client.pem"))
            .arg("--tlskey")
            .arg(c.join("client.key"))
            .args(args);
        cmd
    }

    /// Stdout of a docker command on this engine, asserting it succeeded.
    pub fn out(&self, args: &[&str]) -> String {
        let out = self.docker(args).output().unwrap();
        assert!(
            out.status.success(),
            "docker {args:?} on the second engine: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `docker save` from the machine's engine into this one's image load endpoint.
    pub fn load(&self, image: &str) {
        let mut save = Command::new("docker")
            .args(["save", image])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = self
            .docker(&["load", "-q"])
            .stdin(save.stdout.take().unwrap())
            .output()
            .unwrap();
        assert!(save.wait().unwrap().success(), "docker save {image}");
        assert!(
            out.status.success(),
            "docker load {image}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Every container (any state) and every volume on this engine.
    pub fn leftovers(&self) -> (Vec<String>, Vec<String>) {
        let lines = |s: String| -> Vec<String> {
            s.lines()
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect()
        };
        (
            lines(self.out(&["ps", "-aq"])),
            lines(self.out(&["volume", "ls", "-q"])),
        )
    }
}

impl Drop for SecondEngine {
    fn drop(&mut self) {
        if self.hung {
            self.unhang();
        }
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // Whatever the engine left mounted beneath its directories.
        let root = self.dir.path().to_string_lossy().into_owned();
        if let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") {
            let mut points: Vec<&str> = mounts
                .lines()
                .filter_map(|l| l.split(' ').nth(4))
                .filter(|m| m.starts_with(&root))
                .collect();
            points.sort_by_key(|m| std::cmp::Reverse(m.len()));
            for m in points {
                let _ = Command::new("umount").args(["-l", m]).status();
            }
        }
    }
}
