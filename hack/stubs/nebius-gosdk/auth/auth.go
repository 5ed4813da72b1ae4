// Package auth is a stub of github.com/nebius/gosdk/auth with only the API
// provider-kubernetes uses (see ../go.mod): reading a service account fails.
package auth

import (
	"context"
	"errors"
	"time"
)

var errNotBuiltIn = errors.New("nebius identity support is not built into this test binary (github.com/nebius/gosdk is a stub)")

// BearerToken is an IAM token.
type BearerToken struct {
	Token     string
	ExpiresAt time.Time
}

// ServiceAccount is never produced.
type ServiceAccount struct{}

// ServiceAccountReader reads a service account.
type ServiceAccountReader interface {
	ReadServiceAccount(context.Context) (ServiceAccount, error)
}

// PrivateKeyParser would read a service account from an authorized key.
type PrivateKeyParser struct{}

// NewPrivateKeyParser ignores the key.
func NewPrivateKeyParser(privateKey []byte, publicKeyID, serviceAccountID string) PrivateKeyParser {
	return PrivateKeyParser{}
}

// ReadServiceAccount always fails.
func (PrivateKeyParser) ReadServiceAccount(context.Context) (ServiceAccount, error) {
	return ServiceAccount{}, errNotBuiltIn
}
