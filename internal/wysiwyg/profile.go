package wysiwyg

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Type determination (WYSIWYG §IV-C) happens once per application, in
// CI, by benchmarking; its verdict then picks the allocation mechanism.
// `escractl profile --record DIR` stores the verdict for the profiled
// image, and escrad resolves a container labelled escra.cpu=auto from it:
// C1 if the image was found processor-sensitive, C2 otherwise (also when
// it was never profiled: quota is the default of §IV-B).

// DefaultProfileDir holds the recorded verdicts, one file per image.
const DefaultProfileDir = "/var/lib/escra/cpu-profiles"

// Verdict file contents.
const (
	VerdictWysiwyg = "wysiwyg"
	VerdictShared  = "shared"
)

// profileKey is the file name for an image ID ("sha256:HEX" or HEX): the
// hex digest, so that any tag of the same image finds the same verdict.
func profileKey(imageID string) (string, error) {
	k := strings.TrimPrefix(imageID, "sha256:")
	if len(k) < 12 || len(k) > 128 {
		return "", fmt.Errorf("image id %q: want a sha256 digest", imageID)
	}
	for _, r := range k {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return "", fmt.Errorf("image id %q: want a sha256 digest", imageID)
		}
	}
	return k, nil
}

// RecordProfile stores the verdict (VerdictWysiwyg or VerdictShared) for
// imageID in dir, replacing any earlier one atomically.
func RecordProfile(dir, imageID, verdict string) error {
	if verdict != VerdictWysiwyg && verdict != VerdictShared {
		return fmt.Errorf("profile verdict %q: want %s or %s", verdict, VerdictWysiwyg, VerdictShared)
	}
	k, err := profileKey(imageID)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-"+k+"-*")
	if err != nil {
		return err
	}
	_, err = f.WriteString(verdict + "\n")
	if err2 := f.Close(); err == nil {
		err = err2
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, k))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// ResolveAuto is the class of an escra.cpu=auto container running
// imageID: C1 if its recorded verdict is wysiwyg, else C2. why says where
// the answer came from, for escrad's log line.
func ResolveAuto(dir, imageID string) (c Class, why string) {
	k, err := profileKey(imageID)
	if err != nil {
		return C2, err.Error() + ": shared"
	}
	b, err := os.ReadFile(filepath.Join(dir, k))
	if errors.Is(err, fs.ErrNotExist) {
		return C2, "image not profiled (escractl profile --record): shared"
	}
	if err != nil {
		return C2, fmt.Sprintf("profile unreadable (%v): shared", err)
	}
	switch v := strings.TrimSpace(string(b)); v {
	case VerdictWysiwyg:
		return C1, "profiled processor-sensitive (C1): wysiwyg"
	case VerdictShared:
		return C2, "profiled not processor-sensitive (C2): shared"
	default:
		return C2, fmt.Sprintf("profile says %q, want %s or %s: shared", v, VerdictWysiwyg, VerdictShared)
	}
}
