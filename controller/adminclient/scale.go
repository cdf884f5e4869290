package adminclient

import (
	"context"
	"net/http"
	"net/url"

	"github.com/escra-dev/escra/controller/adminapi"
)

// ScaleOut asks the controller to place and create more containers for an
// app that already runs (Mu's autoscaler).
func (c *Client) ScaleOut(ctx context.Context, app string, cs []DeployContainer) ([]Placed, error) {
	var out adminapi.DeployResponse
	err := c.do(ctx, http.MethodPost, "/v1/apps/"+url.PathEscape(app)+"/containers", adminapi.DeployRequest{Containers: cs}, &out)
	return out.Containers, err
}

// ScaleIn removes one container of an app, by name or container id.
func (c *Client) ScaleIn(ctx context.Context, app, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/apps/"+url.PathEscape(app)+"/containers/"+url.PathEscape(name), nil, nil)
}
