// Command modproxy publishes one version of a module of a git repository
// into a module proxy kept on disk, laid out as the go command reads it
// through GOPROXY=file://DIR (go help goproxy):
//
//	DIR/<escaped module path>/@v/list       the versions, one a line
//	DIR/<escaped module path>/@v/<v>.info   {"Version": v, "Time": commit time}
//	DIR/<escaped module path>/@v/<v>.mod    the module's go.mod
//	DIR/<escaped module path>/@v/<v>.zip    the module zip
//
// The zip is made by golang.org/x/mod/zip.CreateFromVCS from a commit, as
// the go command makes it from a tag: git archive's files, less those of
// nested modules, and for a module in a subdirectory that has no LICENSE
// of its own, the LICENSE at the root of the repository. So its go.sum
// line, which modproxy prints, is the one a public proxy will serve for a
// tag of that commit. modproxy refuses a module with no LICENSE in its zip
// and one whose go.mod has a replace directive (go install pkg@version
// refuses those).
//
// Usage:
//
//	modproxy -proxy DIR -version vX.Y.Z [-rev REV] REPO SUBDIR
//
// REPO is the root of the repository's work tree, SUBDIR the module's
// directory in it ("." for the root), REV the commit (default HEAD).
package main

import (
	"archive/zip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

func main() {
	proxy := flag.String("proxy", "", "directory of the module proxy (created if missing)")
	version := flag.String("version", "", "version to publish, vX.Y.Z")
	rev := flag.String("rev", "HEAD", "commit to publish")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: modproxy -proxy DIR -version vX.Y.Z [-rev REV] REPO SUBDIR")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *proxy == "" || *version == "" || flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	line, err := publish(*proxy, *version, flag.Arg(0), *rev, flag.Arg(1))
	if err != nil {
		fmt.Fprintf(os.Stderr, "modproxy: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(line)
}

// publish writes version of the module in subdir of repo at rev into proxy
// and returns the go.sum line of its zip.
func publish(proxy, version, repo, rev, subdir string) (string, error) {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return "", fmt.Errorf("version %q is not a canonical semantic version (vX.Y.Z)", version)
	}
	repo, err := filepath.Abs(repo)
	if err != nil {
		return "", err
	}
	subdir = path.Clean(filepath.ToSlash(subdir))
	if subdir == "." {
		subdir = ""
	}
	gomod, err := git(repo, "show", rev+":"+path.Join(subdir, "go.mod"))
	if err != nil {
		return "", err
	}
	mf, err := modfile.ParseLax("go.mod", gomod, nil)
	if err != nil {
		return "", err
	}
	if mf.Module == nil {
		return "", fmt.Errorf("%s/go.mod names no module", subdir)
	}
	if len(mf.Replace) > 0 {
		return "", fmt.Errorf("%s go.mod has a replace directive", mf.Module.Mod.Path)
	}
	m := module.Version{Path: mf.Module.Mod.Path, Version: version}
	if err := module.Check(m.Path, m.Version); err != nil {
		return "", err
	}
	stamp, err := git(repo, "log", "-1", "--format=%cI", rev)
	if err != nil {
		return "", err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(stamp)))
	if err != nil {
		return "", err
	}
	escaped, err := module.EscapePath(m.Path)
	if err != nil {
		return "", err
	}
	vdir := filepath.Join(proxy, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return "", err
	}
	base := filepath.Join(vdir, version)

	zipPath := base + ".zip"
	f, err := os.Create(zipPath)
	if err != nil {
		return "", err
	}
	if err := modzip.CreateFromVCS(f, m, repo, rev, subdir); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if err := hasLicense(zipPath, m); err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".mod", gomod, 0o644); err != nil {
		return "", err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".info", append(info, '\n'), 0o644); err != nil {
		return "", err
	}
	if err := addToList(filepath.Join(vdir, "list"), version); err != nil {
		return "", err
	}
	sum, err := dirhash.HashZip(zipPath, dirhash.Hash1)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s %s", m.Path, m.Version, sum), nil
}

// hasLicense reports an error unless the zip of m holds a LICENSE file.
func hasLicense(zipPath string, m module.Version) error {
	r, err := zip.OpenReader(zipPath)
	if err != nil {
		return err
	}
	defer r.Close()
	want := m.Path + "@" + m.Version + "/LICENSE"
	for _, f := range r.File {
		if f.Name == want {
			return nil
		}
	}
	return fmt.Errorf("the zip of %s holds no LICENSE", m)
}

// addToList adds version to the list file once, keeping it sorted.
func addToList(list, version string) error {
	data, err := os.ReadFile(list)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(data))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	return os.WriteFile(list, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// git runs git in dir and returns its standard output.
func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}
