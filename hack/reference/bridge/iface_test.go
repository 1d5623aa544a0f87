package bridge

import (
	"testing"

	"github.com/mcm-rs/mcm-rs/hack/reference/localdriver"
)

func TestTheLocalDriverAndTheFakeFleetListWithIdentity(t *testing.T) {
	var d any = localdriver.New("http://127.0.0.1:9")
	if _, ok := d.(IdentityLister); !ok {
		t.Fatal("localdriver.Driver does not implement IdentityLister")
	}
	var f any = NewFakeFleet(nil)
	if _, ok := f.(IdentityLister); !ok {
		t.Fatal("FakeFleet does not implement IdentityLister")
	}
}
