package seal

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// KeyEnv is the environment variable that, when set, supplies the master key
// as 64 hex digits instead of the key file.
const KeyEnv = "OBLIVKV_KEY"

const keyFileHeader = "oblivkv-master-key-v1 "

// ErrNoKeyFile reports that the key file does not exist.
var ErrNoKeyFile = errors.New("seal: key file does not exist")

// ReadKeyFile reads a master key written by WriteKeyFile. It refuses a key
// file that other users can read.
func ReadKeyFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoKeyFile, path)
	}
	if err != nil {
		return nil, fmt.Errorf("seal: key file: %w", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("seal: key file %s is accessible by other users (mode %v); chmod 600 it", path, info.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("seal: key file: %w", err)
	}
	return ParseKey(strings.TrimSuffix(strings.TrimPrefix(string(raw), keyFileHeader), "\n"), path)
}

// ParseKey decodes a master key given as hex digits; source names where it
// came from, for the error message.
func ParseKey(hexKey, source string) ([]byte, error) {
	m, err := hex.DecodeString(strings.TrimSpace(hexKey))
	if err != nil || len(m) != MasterKeySize {
		return nil, fmt.Errorf("seal: %s does not hold a %d-byte hex master key", source, MasterKeySize)
	}
	return m, nil
}

// WriteKeyFile creates path with mode 0600 holding master. It never
// overwrites an existing file.
func WriteKeyFile(path string, master []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("seal: creating key file: %w", err)
	}
	_, err = f.WriteString(keyFileHeader + hex.EncodeToString(master) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("seal: writing key file: %w", err)
	}
	return nil
}
