package main

import (
	"reflect"
	"unsafe"
)

// deepSize estimates the bytes v keeps alive: its own, and everything it
// points to, each object once (strings and backing arrays by address).
// Maps are estimated from their entries (Go's buckets add about an
// eighth). The fleet simulator's measure of what the engine retains.
func deepSize(v any) int64 {
	z := &sizer{seen: map[uintptr]bool{}}
	rv := reflect.ValueOf(v)
	return int64(rv.Type().Size()) + z.refs(rv)
}

type sizer struct{ seen map[uintptr]bool }

// refs is the bytes v points to, beyond its own inline size.
func (z *sizer) refs(v reflect.Value) int64 {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() || z.once(v.Pointer()) {
			return 0
		}
		e := v.Elem()
		return int64(e.Type().Size()) + z.refs(e)
	case reflect.Interface:
		if v.IsNil() {
			return 0
		}
		e := v.Elem()
		if e.Kind() == reflect.Pointer {
			return z.refs(e)
		}
		return int64(e.Type().Size()) + z.refs(e)
	case reflect.String:
		if v.Len() == 0 {
			return 0
		}
		s := v.String()
		if z.once(uintptr(unsafe.Pointer(unsafe.StringData(s)))) {
			return 0
		}
		return int64(len(s))
	case reflect.Slice:
		if v.IsNil() || v.Cap() == 0 || z.once(v.Pointer()) {
			return 0
		}
		n := int64(v.Cap()) * int64(v.Type().Elem().Size())
		for i := range v.Len() {
			n += z.refs(v.Index(i))
		}
		return n
	case reflect.Array:
		var n int64
		for i := range v.Len() {
			n += z.refs(v.Index(i))
		}
		return n
	case reflect.Struct:
		var n int64
		for i := range v.NumField() {
			n += z.refs(v.Field(i))
		}
		return n
	case reflect.Map:
		if v.IsNil() || z.once(v.Pointer()) {
			return 0
		}
		t := v.Type()
		n := int64(48) + int64(v.Len())*(int64(t.Key().Size())+int64(t.Elem().Size())+1)*9/8
		it := v.MapRange()
		for it.Next() {
			n += z.refs(it.Key()) + z.refs(it.Value())
		}
		return n
	}
	return 0
}

func (z *sizer) once(p uintptr) bool {
	if z.seen[p] {
		return true
	}
	z.seen[p] = true
	return false
}
