// Package wire is what both sides of the plugin protocol share: the
// go-plugin handshake and protocol version, the gRPC settings of the data
// plane, and the conversions between the SDK's plain Go types and the
// generated protocol messages. Plugin authors never import it.
package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pipebackup/pipe/plugins/internal/pb"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// ProtocolVersion is the plugin protocol this build speaks (package
// pipe.plugin.v1).
const ProtocolVersion = 1

// Handshake keeps a plugin binary from being run by anything but pipe, and
// pipe from running a binary that is not a pipe plugin.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "PIPE_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "pipe-endpoints-7c1e2a94",
}

// PluginName is the key of the endpoint service in go-plugin's plugin set.
const PluginName = "endpoints"

// FDEnv names the environment variable that tells a plugin the number of
// its inherited descriptor of the Unix socket files are handed over on.
const FDEnv = "PIPE_PLUGIN_FDS"

// LogLevelEnv names the environment variable that tells a plugin the
// lowest level pipe prints ("debug", "info", "warn", "error"), so records
// below it are not even written.
const LogLevelEnv = "PIPE_PLUGIN_LOG_LEVEL"

// MaxData is the most data bytes one message carries; larger writes and
// reads are split. It keeps messages far below gRPC's limits.
const MaxData = 1 << 20

// window is the HTTP/2 flow-control window of each stream and connection:
// large enough that a fast sink is never starved, small enough to bound the
// bytes in flight between the processes per stream.
const window = 2 << 20

// ServerOptions are the gRPC settings of a plugin process.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(2 * MaxData),
		grpc.MaxSendMsgSize(2 * MaxData),
		grpc.InitialWindowSize(window),
		grpc.InitialConnWindowSize(2 * window),
		grpc.ReadBufferSize(256 << 10),
		grpc.WriteBufferSize(256 << 10),
	}
}

// DialOptions are the gRPC settings of the host.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(2*MaxData), grpc.MaxCallSendMsgSize(2*MaxData)),
		grpc.WithInitialWindowSize(window),
		grpc.WithInitialConnWindowSize(2 * window),
		grpc.WithReadBufferSize(256 << 10),
		grpc.WithWriteBufferSize(256 << 10),
	}
}

// GRPCPlugin registers the endpoint service with go-plugin. Impl is set in
// the plugin process; the host only uses GRPCClient.
type GRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	Impl pb.PluginServer
}

func (p *GRPCPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterPluginServer(s, p.Impl)
	return nil
}

func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pb.NewPluginClient(c), nil
}

// Plugins is the versioned plugin set both sides negotiate.
func Plugins(server pb.PluginServer) map[int]goplugin.PluginSet {
	return map[int]goplugin.PluginSet{
		ProtocolVersion: {PluginName: &GRPCPlugin{Impl: server}},
	}
}

var typeToPB = map[sdk.Type]pb.Type{
	sdk.String: pb.Type_TYPE_STRING, sdk.Number: pb.Type_TYPE_NUMBER, sdk.Bool: pb.Type_TYPE_BOOL,
	sdk.StringList: pb.Type_TYPE_STRING_LIST, sdk.StringMap: pb.Type_TYPE_STRING_MAP,
	sdk.Size: pb.Type_TYPE_SIZE, sdk.Duration: pb.Type_TYPE_DURATION,
}

// SchemaToPB converts a schema for the wire.
func SchemaToPB(s sdk.Schema) (*pb.Schema, error) {
	out := &pb.Schema{Description: s.Description, Storage: s.Storage, ExclusiveCreate: s.ExclusiveCreate}
	for _, a := range s.Attributes {
		pa := &pb.Attribute{Name: a.Name, Type: typeToPB[a.Type], Required: a.Required, Description: a.Description, Secret: a.Secret, Key: a.Key, Profile: a.Profile, Public: a.Public, StreamName: a.StreamName, Consumer: a.Consumer, Target: a.Target}
		if a.Default != nil {
			v, err := ValueToPB(a.Type, a.Default)
			if err != nil {
				return nil, fmt.Errorf("attribute %q: default: %w", a.Name, err)
			}
			pa.Default = v
		}
		out.Attributes = append(out.Attributes, pa)
	}
	return out, nil
}

// SchemaFromPB converts a schema from the wire.
func SchemaFromPB(s *pb.Schema) sdk.Schema {
	out := sdk.Schema{Description: s.GetDescription(), Storage: s.GetStorage(), ExclusiveCreate: s.GetExclusiveCreate()}
	for _, a := range s.GetAttributes() {
		var t sdk.Type
		for k, v := range typeToPB {
			if v == a.GetType() {
				t = k
			}
		}
		sa := sdk.Attribute{Name: a.GetName(), Type: t, Required: a.GetRequired(), Description: a.GetDescription(), Secret: a.GetSecret(), Key: a.GetKey(), Profile: a.GetProfile(), Public: a.GetPublic(), StreamName: a.GetStreamName(), Consumer: a.GetConsumer(), Target: a.GetTarget()}
		if a.Default != nil {
			sa.Default = ValueFromPB(a.Default)
		}
		out.Attributes = append(out.Attributes, sa)
	}
	return out
}

// ValueToPB converts a config value of type t.
func ValueToPB(t sdk.Type, v any) (*pb.Value, error) {
	switch x := v.(type) {
	case string:
		return &pb.Value{Kind: &pb.Value_String_{String_: x}}, nil
	case int64:
		return &pb.Value{Kind: &pb.Value_Number{Number: x}}, nil
	case bool:
		return &pb.Value{Kind: &pb.Value_Bool{Bool: x}}, nil
	case []string:
		return &pb.Value{Kind: &pb.Value_StringList_{StringList: &pb.Value_StringList{Values: x}}}, nil
	case map[string]string:
		return &pb.Value{Kind: &pb.Value_StringMap_{StringMap: &pb.Value_StringMap{Values: x}}}, nil
	case time.Duration:
		return &pb.Value{Kind: &pb.Value_DurationNs{DurationNs: int64(x)}}, nil
	}
	return nil, fmt.Errorf("a %s attribute cannot hold a %T", t, v)
}

// ValueFromPB converts a config value from the wire to its Go type.
func ValueFromPB(v *pb.Value) any {
	switch k := v.GetKind().(type) {
	case *pb.Value_String_:
		return k.String_
	case *pb.Value_Number:
		return k.Number
	case *pb.Value_Bool:
		return k.Bool
	case *pb.Value_StringList_:
		return append([]string{}, k.StringList.GetValues()...)
	case *pb.Value_StringMap_:
		m := map[string]string{}
		for key, val := range k.StringMap.GetValues() {
			m[key] = val
		}
		return m
	case *pb.Value_DurationNs:
		return time.Duration(k.DurationNs)
	}
	return nil
}

// ConfigToPB converts a config for the wire.
func ConfigToPB(s sdk.Schema, c sdk.Config) (map[string]*pb.Value, error) {
	out := map[string]*pb.Value{}
	vals := c.Values()
	names := make([]string, 0, len(vals))
	for n := range vals {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		a, _ := s.Attribute(n)
		v, err := ValueToPB(a.Type, vals[n])
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", n, err)
		}
		out[n] = v
	}
	return out, nil
}

// ConfigFromPB converts a config from the wire.
func ConfigFromPB(m map[string]*pb.Value) sdk.Config {
	vals := make(map[string]any, len(m))
	for k, v := range m {
		vals[k] = ValueFromPB(v)
	}
	return sdk.NewConfig(vals)
}

// ObjectToPB is an object as the host sends it.
func ObjectToPB(o sdk.Object) *pb.Object {
	return &pb.Object{Key: o.Key, Stream: o.Stream, Size: o.Size, MaxSize: o.MaxSize, Replace: o.Replace, Exclusive: o.Exclusive}
}

// ObjectFromPB is an object as the plugin receives it.
func ObjectFromPB(o *pb.Object) sdk.Object {
	max := o.GetMaxSize()
	if max == 0 && o.GetSize() != 0 {
		max = -1 // sent by a host that did not know MaxSize
	}
	return sdk.Object{Key: o.GetKey(), Stream: o.GetStream(), Size: o.GetSize(), MaxSize: max, Replace: o.GetReplace(), Exclusive: o.GetExclusive()}
}

// DiagsToPB converts diagnostics for the wire.
func DiagsToPB(ds sdk.Diagnostics) []*pb.Diagnostic {
	var out []*pb.Diagnostic
	for _, d := range ds {
		sev := pb.Diagnostic_SEVERITY_ERROR
		if d.Severity == sdk.Warning {
			sev = pb.Diagnostic_SEVERITY_WARNING
		}
		out = append(out, &pb.Diagnostic{Severity: sev, Summary: d.Summary, Detail: d.Detail, Attribute: d.Attribute})
	}
	return out
}

// DiagsFromPB converts diagnostics from the wire.
func DiagsFromPB(ds []*pb.Diagnostic) sdk.Diagnostics {
	var out sdk.Diagnostics
	for _, d := range ds {
		sev := sdk.Error
		if d.GetSeverity() == pb.Diagnostic_SEVERITY_WARNING {
			sev = sdk.Warning
		}
		out = append(out, sdk.Diagnostic{Severity: sev, Summary: d.GetSummary(), Detail: d.GetDetail(), Attribute: d.GetAttribute()})
	}
	return out
}

// ToStatus turns an endpoint's error into a gRPC status, keeping the
// sentinels the host checks for.
func ToStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sdk.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, sdk.ErrExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return status.Error(codes.OutOfRange, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

// notFound keeps a plugin's message while matching sdk.ErrNotFound.
type notFound struct{ msg string }

func (e notFound) Error() string        { return e.msg }
func (e notFound) Is(target error) bool { return target == sdk.ErrNotFound }

// exists keeps a plugin's message while matching sdk.ErrExists.
type exists struct{ msg string }

func (e exists) Error() string        { return e.msg }
func (e exists) Is(target error) bool { return target == sdk.ErrExists }

// short keeps a plugin's message while matching io.ErrUnexpectedEOF: an
// object that ended before the range asked of it.
type short struct{ msg string }

func (e short) Error() string        { return e.msg }
func (e short) Is(target error) bool { return target == io.ErrUnexpectedEOF }

// kept is a plugin's error that matches a context error (a timeout of the
// plugin's own, say) with the plugin's message as it was: the message
// already says what happened.
type kept struct {
	msg string
	is  error
}

func (e kept) Error() string { return e.msg }
func (e kept) Unwrap() error { return e.is }

// FromStatus turns a gRPC status back into an error; ctx tells a
// cancellation the host asked for from one the plugin went through.
func FromStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.NotFound:
		return notFound{st.Message()}
	case codes.AlreadyExists:
		return exists{st.Message()}
	case codes.OutOfRange:
		return short{st.Message()}
	case codes.Canceled:
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return kept{st.Message(), context.Canceled}
	case codes.DeadlineExceeded:
		return kept{st.Message(), context.DeadlineExceeded}
	case codes.Unknown:
		return errors.New(st.Message())
	}
	return fmt.Errorf("%s (%s)", st.Message(), st.Code())
}
