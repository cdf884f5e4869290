package store

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// CheckAuth checks that etcd enforces its RBAC on this controller: auth is
// enabled and the controller's user (with --client-cert-auth, the common
// name of its client certificate) is not root. Listing etcd's users is a
// root-only call once auth is on, so an answer means either auth is off or
// the controller could rewrite every key and user in etcd.
func (s *Etcd) CheckAuth(ctx context.Context) error {
	_, err := s.cli.UserList(ctx)
	switch {
	case err == nil:
		return fmt.Errorf("etcd lets this controller list its users: auth is off (etcdctl auth enable) or the controller's user has the root role; give each controller its own user with a role on %s only", s.prefix)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return nil
	}
	return fmt.Errorf("etcd auth check: %w", err)
}
