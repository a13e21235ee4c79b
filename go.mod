module github.com/agentrun/agentrun

go 1.26.8

require (
	github.com/containerd/cgroups/v3 v3.1.3
	github.com/opencontainers/runtime-spec v1.3.0
	github.com/seccomp/libseccomp-golang v0.11.1
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/sys v0.49.0
)

require (
	github.com/moby/sys/userns v0.1.0 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
)
