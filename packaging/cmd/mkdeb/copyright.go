package main

import (
	"fmt"
	"strings"
)

// Licenses of the parts of the tree: the Go code is Apache-2.0 (LICENSE),
// the kernel module, the kernel patches and the BPF program GPL-2.0
// (kmod/LICENSE, patches/LICENSE, daemon/source/bpf/c/LICENSE).
const (
	licGo     = "Apache-2.0"
	licKernel = "GPL-2.0"
)

// copyrightStanza is one Files paragraph of a machine-readable
// debian/copyright (DEP-5).
type copyrightStanza struct{ files, license, comment string }

// copyrightFile renders /usr/share/doc/PKG/copyright in the DEP-5 format
// (https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/),
// pointing at Debian's copies of the license texts as policy §12.5 asks.
func copyrightFile(pkgName string, stanzas []copyrightStanza) string {
	var b strings.Builder
	b.WriteString("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n")
	fmt.Fprintf(&b, "Upstream-Name: %s\n", pkgName)
	b.WriteString("Upstream-Contact: " + maintainer + "\n")
	b.WriteString("Source: https://github.com/escra-dev/escra\n")
	seen := map[string]bool{}
	for _, s := range stanzas {
		fmt.Fprintf(&b, "\nFiles: %s\nCopyright: 2026 Escra maintainers\nLicense: %s\n", s.files, s.license)
		if s.comment != "" {
			fmt.Fprintf(&b, "Comment: %s\n", s.comment)
		}
	}
	for _, s := range stanzas {
		if seen[s.license] {
			continue
		}
		seen[s.license] = true
		fmt.Fprintf(&b, "\nLicense: %s\n%s\n", s.license, licenseBody[s.license])
	}
	return b.String()
}

var licenseBody = map[string]string{
	licGo: ` Licensed under the Apache License, Version 2.0 (the "License"); you may
 not use this file except in compliance with the License.
 .
 Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
 WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
 License for the specific language governing permissions and limitations
 under the License.
 .
 On Debian systems, the complete text of the Apache License, Version 2.0
 can be found in "/usr/share/common-licenses/Apache-2.0".`,
	licKernel: ` This program is free software; you can redistribute it and/or modify it
 under the terms of the GNU General Public License version 2 as published
 by the Free Software Foundation.
 .
 This program is distributed in the hope that it will be useful, but
 WITHOUT ANY WARRANTY; without even the implied warranty of
 MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE. See the GNU General
 Public License for more details.
 .
 On Debian systems, the complete text of the GNU General Public License
 version 2 can be found in "/usr/share/common-licenses/GPL-2".`,
}

// goModules is the note on the Go modules linked into the binaries.
const goModules = "The binaries also contain the Go modules they were built with, " +
	"each under its own license; go version -m /usr/bin/NAME lists them."
