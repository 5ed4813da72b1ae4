// Command apicheck proves that a pod reaches its cluster's API server the
// way in-cluster clients do: through the `kubernetes` Service
// (KUBERNETES_SERVICE_HOST/PORT), trusting the ServiceAccount's ca.crt and
// authenticating with its token. Until both answer it retries every second,
// printing each failure; then it prints
//
//	apicheck: version <gitVersion> (<the API server address it used>)
//	apicheck: authenticated as <user name the API server gave the token>
//
// and sleeps until SIGTERM/SIGINT, so a Deployment of it stays Available and
// its log can be read.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		os.Exit(0)
	}()
	base := "https://" + net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	for attempt := 1; ; attempt++ {
		err := check(base)
		if err == nil {
			break
		}
		fmt.Printf("apicheck: attempt %d: %v\n", attempt, err)
		time.Sleep(time.Second)
	}
	select {}
}

func check(base string) error {
	var version struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := call(http.MethodGet, base+"/version", nil, &version); err != nil {
		return err
	}
	// Any authenticated identity may create a SelfSubjectReview; the answer
	// names the user the token authenticated as.
	review := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	var who struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := call(http.MethodPost, base+"/apis/authentication.k8s.io/v1/selfsubjectreviews", review, &who); err != nil {
		return err
	}
	fmt.Printf("apicheck: version %s (%s)\n", version.GitVersion, base)
	fmt.Printf("apicheck: authenticated as %s\n", who.Status.UserInfo.Username)
	return nil
}

func call(method, url string, body []byte, into any) error {
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("no certificate in %s/ca.crt", saDir)
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(data)))
	}
	return json.Unmarshal(data, into)
}
