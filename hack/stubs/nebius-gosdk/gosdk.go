// Package gosdk is a stub of github.com/nebius/gosdk with only the API
// provider-kubernetes uses (see go.mod): New and SDK.BearerToken fail.
package gosdk

import (
	"context"
	"errors"

	"github.com/nebius/gosdk/auth"
)

var errNotBuiltIn = errors.New("nebius identity support is not built into this test binary (github.com/nebius/gosdk is a stub)")

// SDK never exists: New fails.
type SDK struct{}

// Option configures New.
type Option interface{ option() }

// Credentials are what WithCredentials takes.
type Credentials interface{ credentials() }

type credentialsOption struct{}

func (credentialsOption) option() {}

type serviceAccountCredentials struct{}

func (serviceAccountCredentials) credentials() {}

// WithCredentials is accepted and ignored.
func WithCredentials(Credentials) Option { return credentialsOption{} }

// ServiceAccountReader is accepted and ignored.
func ServiceAccountReader(auth.ServiceAccountReader) Credentials { return serviceAccountCredentials{} }

// New always fails.
func New(context.Context, ...Option) (*SDK, error) { return nil, errNotBuiltIn }

// BearerToken always fails.
func (*SDK) BearerToken(context.Context) (auth.BearerToken, error) {
	return auth.BearerToken{}, errNotBuiltIn
}
