// Package names holds the one rule for app names, used by the spec, the
// controller's admin API and --apps files, the state store, escrad's
// escra.app label and --apps flag. An app's name becomes part of Docker
// container names (APP-CONTAINER-N) and of metric labels, so the rule is
// the strictest of those: an RFC 1123 DNS label.
package names

import "fmt"

// MaxApp is the longest app name: a DNS label's 63 characters.
const MaxApp = 63

// Rule says what an app name may be, for error messages and docs.
const Rule = "1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"

// ValidApp reports whether name follows the rule.
func ValidApp(name string) bool { return ValidLabel(name) }

// ValidateApp returns an error naming the rule when name breaks it.
func ValidateApp(name string) error {
	if ValidApp(name) {
		return nil
	}
	if name == "" {
		return fmt.Errorf("app name is empty: want %s", Rule)
	}
	return fmt.Errorf("app name %q: want %s", name, Rule)
}

// ValidLabel reports whether s is a DNS label: the rule for app and
// container template names in a spec.
func ValidLabel(s string) bool {
	if len(s) == 0 || len(s) > MaxApp {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}
