"""The StateLens side of the differential fuzzer: wrap a pickle as a torch zip checkpoint and read
what `statelens ls --format json` says about its imports."""
import json
import os
import subprocess
import zipfile


class StateLens:
    def __init__(self, binary, workdir, timeout=30):
        if not os.access(binary, os.X_OK):
            raise SystemExit("statelens binary not found or not executable: %s (see --statelens)" % binary)
        self.binary = binary
        self.path = os.path.join(workdir, "case.pt")
        self.timeout = timeout

    def ls(self, pickle_bytes):
        """Returns {rc, verdict, refused, executes, text}. rc is "timeout" when ls did not finish;
        text is the findings' messages and stderr, where a failed read names its dangers."""
        with zipfile.ZipFile(self.path, "w") as z:
            z.writestr("archive/data.pkl", pickle_bytes)
            z.writestr("archive/version", "3\n")
        out = {"rc": None, "verdict": None, "refused": [], "executes": [], "text": ""}
        try:
            p = subprocess.run([self.binary, "ls", self.path, "--format", "json"], capture_output=True,
                               timeout=self.timeout)
        except subprocess.TimeoutExpired:
            out["rc"] = "timeout"
            return out
        out["rc"] = p.returncode
        findings = []
        if p.stdout.strip():
            try:
                j = json.loads(p.stdout)
                wo = j.get("source", {}).get("weights_only") or {}
                out["verdict"] = wo.get("verdict")
                out["refused"] = wo.get("refused") or []
                out["executes"] = wo.get("executes") or []
                findings = [f.get("message", "") for f in j.get("findings", [])]
            except ValueError as e:
                out["json_error"] = str(e)
        out["text"] = "\n".join(findings + [p.stderr.decode("utf-8", "replace")])
        return out
