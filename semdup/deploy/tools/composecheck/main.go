// Command composecheck validates semdup's deployment files without a Docker engine: it loads
// docker-compose.yml the way `docker compose config` does (compose-go: compose-spec schema, interpolation
// from the env file, normalisation; the services' own env_file is not read, so no .env is needed) and parses
// the Dockerfile with BuildKit's parser and linter (all rules, experimental ones included).
//
//	cd semdup/deploy/tools/composecheck && go build -o /tmp/composecheck . && cd ../../../..
//	/tmp/composecheck semdup/deploy/compose/docker-compose.yml semdup/deploy/compose/.env.example \
//	    semdup/deploy/docker/Dockerfile
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Println("usage: composecheck docker-compose.yml ENV_FILE Dockerfile")
		os.Exit(2)
	}
	composeFile, envFile, dockerfile := os.Args[1], os.Args[2], os.Args[3]
	opts, err := cli.NewProjectOptions([]string{composeFile},
		cli.WithWorkingDirectory(filepath.Dir(composeFile)),
		cli.WithEnvFiles(envFile), cli.WithDotEnv, cli.WithProfiles([]string{"gpu", "tools"}),
		cli.WithLoadOptions(func(o *loader.Options) { o.SkipResolveEnvironment = true }))
	if err != nil {
		fmt.Println("options:", err)
		os.Exit(1)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		fmt.Println("compose INVALID:", err)
		os.Exit(1)
	}
	for _, name := range project.ServiceNames() {
		s := project.Services[name]
		hc := "none"
		if s.HealthCheck != nil {
			hc = fmt.Sprint(s.HealthCheck.Test[0])
		}
		dev := 0
		if s.Deploy != nil && s.Deploy.Resources.Reservations != nil {
			dev = len(s.Deploy.Resources.Reservations.Devices)
		}
		fmt.Printf("service %-13s image=%-38s healthcheck=%-9s gpu_devices=%d command=%v\n", name, s.Image, hc, dev, []string(s.Command))
	}
	fmt.Println("compose OK:", len(project.Services), "services,", len(project.Volumes), "volumes")

	f, err := os.Open(dockerfile)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	res, err := parser.Parse(f)
	if err != nil {
		fmt.Println("Dockerfile INVALID:", err)
		os.Exit(1)
	}
	lint := linter.New(&linter.Config{ExperimentalAll: true, Warn: func(rule, desc, url, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		fmt.Printf("Dockerfile lint %s (line %d): %s\n", rule, line, msg)
	}})
	stages, metaArgs, err := instructions.Parse(res.AST, lint)
	if err != nil {
		fmt.Println("Dockerfile INVALID:", err)
		os.Exit(1)
	}
	for _, w := range res.Warnings {
		fmt.Println("Dockerfile warning:", w.Short)
	}
	for _, st := range stages {
		fmt.Printf("stage %-11s FROM %-20s %d instructions\n", st.Name, st.BaseName, len(st.Commands))
	}
	fmt.Println("Dockerfile OK:", len(stages), "stages,", len(metaArgs), "global ARGs")
}
